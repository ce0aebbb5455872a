//! Running the tools: operands no tool takes for an option, clang and ld.lld started and their
//! failures reported, a kernel compiled for Hexagon (without HVX when clang-19's backend cannot
//! select it).

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

use crate::consts::HEXAGON_CFLAGS;
use crate::error::BuildError;

/// `path` as a command-line operand: a relative path starting with `-` gets a `./` prefix, so no
/// tool can take it for an option.
pub fn operand(path: &Path) -> OsString {
    if path.as_os_str().as_encoded_bytes().first() == Some(&b'-') {
        let mut s = OsString::from("./");
        s.push(path.as_os_str());
        s
    } else {
        path.as_os_str().to_owned()
    }
}

pub(crate) fn run(tool: &Path, args: &[OsString]) -> Result<(), BuildError> {
    run_output(tool, args).map(|_| ())
}

pub(crate) fn run_output(tool: &Path, args: &[OsString]) -> Result<Vec<u8>, BuildError> {
    let output = Command::new(tool).args(args).output().map_err(|error| BuildError::ToolMissing { tool: tool.to_path_buf(), error })?;
    if output.status.success() {
        return Ok(output.stdout);
    }
    let mut command = tool.display().to_string();
    for a in args {
        command.push(' ');
        command.push_str(&a.to_string_lossy());
    }
    Err(BuildError::ToolFailed { command, status: output.status.code(), stderr: String::from_utf8_lossy(&output.stderr).into_owned() })
}

/// Compiles one C file for Hexagon with [`HEXAGON_CFLAGS`] plus `extra`.
pub fn compile_hexagon(clang: &Path, source: &Path, object: &Path, extra: &[OsString]) -> Result<(), BuildError> {
    let mut args: Vec<OsString> = HEXAGON_CFLAGS.iter().map(OsString::from).collect();
    args.extend(extra.iter().cloned());
    args.extend(["-o".into(), operand(object), "-c".into(), "--".into(), operand(source)]);
    run(clang, &args)
}

/// What clang-19's Hexagon backend says when it cannot select HVX instructions for some vector
/// code (seen for tinygrad's `one_hot`: compares of an int vector selecting 0/1, an HVX
/// predicate bitcast): a compiler defect, not a fault of the kernel.
const HVX_SELECT_FAILURE: &str = "error in backend: Cannot select";

/// Compiles a kernel; if clang-19's backend fails to select HVX instructions for it
/// ([`HVX_SELECT_FAILURE`]), compiles it again without HVX code generation (the kernel's vector
/// types are generic vector extensions, lowered to scalar Hexagon code: the same results,
/// slower). Returns true when it fell back.
pub(crate) fn compile_kernel(clang: &Path, source: &Path, object: &Path, extra: &[OsString]) -> Result<bool, BuildError> {
    match compile_hexagon(clang, source, object, extra) {
        Err(BuildError::ToolFailed { stderr, .. }) if stderr.contains(HVX_SELECT_FAILURE) => {
            let mut args: Vec<OsString> = HEXAGON_CFLAGS.iter().filter(|f| !f.starts_with("-mhvx")).map(OsString::from).collect();
            args.extend(extra.iter().cloned());
            args.extend(["-o".into(), operand(object), "-c".into(), "--".into(), operand(source)]);
            run(clang, &args)?;
            Ok(true)
        }
        r => r.map(|()| false),
    }
}
