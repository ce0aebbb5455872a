//! Running the tools: operands no tool takes for an option, clang and ld.lld started and their
//! failures reported, a kernel compiled for Hexagon with HVX, or clang-19's reason why it cannot
//! be and the kernel compiled without.

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

use crate::consts::{HEXAGON_CFLAGS, KERNEL_CFLAGS};
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
/// code (seen for a `_Bool` vector of 32 lanes stored as its bits, an HVX predicate; and, with
/// `-mhvx` but without `-hexagon-autohvx`, for tinygrad's `one_hot`: compares of an int vector
/// selecting 0/1): a compiler defect, not a fault of the kernel.
const HVX_SELECT_FAILURE: &str = "error in backend: Cannot select";

/// Longest reason [`hvx_failure_reason`] keeps (clang's line names the DAG node, operands and
/// all, which can run to hundreds of characters).
const REASON_CHARS: usize = 240;

/// clang's reason, from its stderr: the first line that says [`HVX_SELECT_FAILURE`] (`fatal
/// error: error in backend: Cannot select: ...`), trimmed, cut at [`REASON_CHARS`] characters
/// with `...`.
pub(crate) fn hvx_failure_reason(stderr: &str) -> String {
    let line = stderr.lines().find(|l| l.contains(HVX_SELECT_FAILURE)).unwrap_or(HVX_SELECT_FAILURE).trim();
    match line.char_indices().nth(REASON_CHARS) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None => line.to_owned(),
    }
}

/// Compiles a kernel with HVX code generation: [`HEXAGON_CFLAGS`], [`KERNEL_CFLAGS`], then
/// `extra`. `Ok(None)` when it compiled; `Ok(Some(reason))` when clang-19's backend could not
/// select HVX instructions for it ([`hvx_failure_reason`]; no object was written), for the
/// caller to refuse the kernel or [`compile_kernel_without_hvx`]; any other failure is an error.
pub(crate) fn compile_kernel(clang: &Path, source: &Path, object: &Path, extra: &[OsString]) -> Result<Option<String>, BuildError> {
    let mut flags: Vec<OsString> = KERNEL_CFLAGS.iter().map(OsString::from).collect();
    flags.extend(extra.iter().cloned());
    match compile_hexagon(clang, source, object, &flags) {
        Ok(()) => Ok(None),
        Err(BuildError::ToolFailed { stderr, .. }) if stderr.contains(HVX_SELECT_FAILURE) => Ok(Some(hvx_failure_reason(&stderr))),
        Err(e) => Err(e),
    }
}

/// Compiles a kernel without HVX code generation: [`HEXAGON_CFLAGS`] less its `-mhvx` flags,
/// then `extra`. The kernel's vector types are generic vector extensions, lowered to scalar
/// Hexagon code: the same results, slower.
pub(crate) fn compile_kernel_without_hvx(clang: &Path, source: &Path, object: &Path, extra: &[OsString]) -> Result<(), BuildError> {
    let mut args: Vec<OsString> = HEXAGON_CFLAGS.iter().filter(|f| !f.starts_with("-mhvx")).map(OsString::from).collect();
    args.extend(extra.iter().cloned());
    args.extend(["-o".into(), operand(object), "-c".into(), "--".into(), operand(source)]);
    run(clang, &args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_is_clangs_cannot_select_line_cut_to_length() {
        let stderr = "fatal error: error in backend: Cannot select: 0x55aa68f8d020: ch = store<(store (s32))> 0x1, undef:i32\n  \
                      0x55aa68f8d480: v32i1 = setcc\nIn function: k\n";
        assert_eq!(
            hvx_failure_reason(stderr),
            "fatal error: error in backend: Cannot select: 0x55aa68f8d020: ch = store<(store (s32))> 0x1, undef:i32"
        );
        let long = format!("warning: first\n  fatal error: error in backend: Cannot select: {}\n", "\u{e9}".repeat(400));
        let reason = hvx_failure_reason(&long);
        assert!(reason.starts_with("fatal error: error in backend: Cannot select: \u{e9}"), "{reason}");
        assert!(reason.ends_with("\u{e9}..."), "{reason}");
        assert_eq!(reason.chars().count(), REASON_CHARS + 3);
    }
}
