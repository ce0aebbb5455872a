//! One kernel of a build: its source, name and signature, its parameters checked against the
//! signature (giving the prototype that pins them), and the line that includes its source.

use std::path::Path;

use hexrpc_runtime::launch::{ParamKind, Signature};

use crate::ast::{strip_qualifiers, ParamType};
use crate::error::{io_err, BuildError};

/// One kernel of a build: its source, its C function name and its signature. (A library holds
/// one kernel today; the pipeline below works on a list so that it can hold several.)
pub(crate) struct KernelSpec<'a> {
    pub(crate) source: &'a Path,
    pub(crate) name: String,
    pub(crate) sig: &'a Signature,
}

/// Checks the kernel's parameters against the signature and returns the prototype that pins
/// them (the kernel's own spelling for pointers, the signature's C type for scalars).
pub(crate) fn check_params(kernel: &KernelSpec<'_>, params: &[ParamType], ret: &str, table: bool) -> Result<(String, bool), BuildError> {
    let want = kernel.sig.params();
    let mismatch = |detail: String| BuildError::SignatureMismatch { kernel: kernel.name.clone(), detail };
    let returns_status = match ret {
        "void" => false,
        "int" if table => true,
        other if table => return Err(mismatch(format!("it returns `{other}`: a kernel returns void, or int (its status in a batch)"))),
        other => return Err(mismatch(format!("it returns `{other}`: a single-kernel library's kernel returns void"))),
    };
    if params.len() != want.len() {
        return Err(mismatch(format!("it takes {} parameters, the signature {} ({})", params.len(), want.len(), kernel.sig)));
    }
    let mut proto = format!("{} {}(", if returns_status { "int" } else { "void" }, kernel.name);
    for (i, (p, w)) in params.iter().zip(want).enumerate() {
        if i > 0 {
            proto.push_str(", ");
        }
        match w {
            ParamKind::Buffer => {
                if !p.canonical.contains('*') {
                    return Err(mismatch(format!("parameter {} is `{}`, but the signature says buf (a pointer)", i + 1, p.written)));
                }
                proto.push_str(&p.written);
            }
            ParamKind::Scalar(t) => {
                if p.canonical.contains('*') || strip_qualifiers(&p.canonical) != t.c_type() {
                    return Err(mismatch(format!(
                        "parameter {} is `{}`, but the signature says {} (`{}`)",
                        i + 1,
                        p.written,
                        t.name(),
                        t.c_type()
                    )));
                }
                proto.push_str(t.c_type());
            }
        }
    }
    if want.is_empty() {
        proto.push_str("void");
    }
    proto.push_str(");\n");
    Ok((proto, returns_status))
}

/// `#include` line for `path` (absolute; `\` and `"` escaped).
pub(crate) fn include_line(path: &Path) -> Result<String, BuildError> {
    let abs = std::fs::canonicalize(path).map_err(io_err(path))?;
    let text = abs.to_string_lossy();
    if text.contains('\n') {
        return Err(BuildError::KernelNotFile(path.to_path_buf()));
    }
    Ok(format!("#include \"{}\"\n", text.replace('\\', "\\\\").replace('"', "\\\"")))
}
