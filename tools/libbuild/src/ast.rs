//! Reading clang's JSON AST dump of a kernel source: the kernel function's parameters and return
//! type, and its conversions from a 16-bit integer to `__fp16`, on a thread with stack enough
//! for deeply nested expressions.

use serde_json::Value;

/// One parameter of the kernel as clang sees it: the type as written and its canonical form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ParamType {
    pub(crate) written: String,
    pub(crate) canonical: String,
}

/// What the AST dump says about the kernel function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum KernelLookup {
    /// Defined: its parameters and its return type (canonical, typedefs resolved).
    Defined(Vec<ParamType>, String),
    /// Declared but not defined in the source.
    Declared,
    /// Not there at all.
    Missing,
}

/// The type of an AST node as clang's JSON dump gives it: `(written, canonical)`. The canonical
/// form (`desugaredQualType`) is present only when it differs from the written one.
fn json_type(node: &Value) -> Option<(String, String)> {
    let ty = node.get("type")?;
    let written = ty.get("qualType")?.as_str()?.to_string();
    let canonical = ty.get("desugaredQualType").and_then(Value::as_str).map_or_else(|| written.clone(), str::to_string);
    Some((written, canonical))
}

/// Stack for reading clang's JSON AST dumps: the dump nests one object per expression level,
/// and a kernel with a long expression (tinygrad's losses) nests hundreds of levels deep, past
/// serde_json's default limit of 128. The dump is read without that limit on a thread of this
/// much (virtual, committed as used) stack, where parsing, walking and dropping the tree
/// recurse.
const AST_STACK: usize = 256 << 20;

/// Runs `f` on a thread with [`AST_STACK`] bytes of stack.
pub(crate) fn on_ast_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    let f = std::sync::Mutex::new(Some(f));
    let take = || f.lock().unwrap_or_else(|p| p.into_inner()).take();
    let spawned = std::thread::scope(|s| {
        let h = std::thread::Builder::new().name("ast".into()).stack_size(AST_STACK).spawn_scoped(s, || take().map(|f| f()));
        h.ok().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    });
    match spawned.flatten() {
        Some(t) => t,
        // No thread could start: read it here, as deep as this thread's stack allows.
        None => take().map(|f| f()).expect("the closure runs once"),
    }
}

/// The top-level JSON objects of a dump, without serde_json's nesting limit (see
/// [`AST_STACK`]; call on that stack).
fn dump_objects(dump: &[u8]) -> impl Iterator<Item = Result<Value, String>> + '_ {
    let mut de = serde_json::Deserializer::from_slice(dump);
    de.disable_recursion_limit();
    de.into_iter::<Value>().map(|r| r.map_err(|e| format!("clang's JSON AST dump does not parse: {e}")))
}

/// Reads clang's JSON AST dump (`-ast-dump=json -ast-dump-filter NAME`: a sequence of JSON
/// objects, one per top-level declaration whose name contains NAME) for function `name`. An
/// error is a dump that is not a sequence of JSON objects of the expected shape.
pub(crate) fn kernel_params(dump: &[u8], name: &str) -> Result<KernelLookup, String> {
    let mut found = KernelLookup::Missing;
    for decl in dump_objects(dump) {
        let decl = decl?;
        if decl.get("kind").and_then(Value::as_str) != Some("FunctionDecl") || decl.get("name").and_then(Value::as_str) != Some(name) {
            continue;
        }
        let no_type = || format!("the declaration of `{name}` in clang's JSON AST dump has no type");
        let (_, fn_type) = json_type(&decl).ok_or_else(no_type)?;
        // The function's type is 'RET (PARAMS)'.
        let ret = fn_type.split_once('(').map_or(String::new(), |(r, _)| r.trim().to_string());
        let inner: &[Value] = decl.get("inner").and_then(Value::as_array).map_or(&[], Vec::as_slice);
        let kind = |n: &Value, k: &str| n.get("kind").and_then(Value::as_str) == Some(k);
        if !inner.iter().any(|n| kind(n, "CompoundStmt")) {
            found = KernelLookup::Declared;
            continue;
        }
        let mut params = Vec::new();
        for p in inner.iter().filter(|n| kind(n, "ParmVarDecl")) {
            let (written, canonical) = json_type(p).ok_or_else(no_type)?;
            params.push(ParamType { written, canonical });
        }
        return Ok(KernelLookup::Defined(params, ret));
    }
    Ok(found)
}

/// Every conversion from `short` / `unsigned short` to `__fp16` (however spelled through
/// typedefs) in the definition of `name` in clang's JSON AST dump, each with its source line
/// where the dump gives one. (The JSON dump omits a location's line when it equals the previous
/// one printed, so the last line seen in document order is the cast's.)
pub(crate) fn short_to_half_casts(dump: &[u8], name: &str) -> Result<Vec<Option<u64>>, String> {
    fn walk(node: &Value, line: &mut Option<u64>, found: &mut Vec<Option<u64>>) {
        for loc in [node.get("loc"), node.get("range").and_then(|r| r.get("begin"))].into_iter().flatten() {
            // A location inside a macro expansion has its line under "spellingLoc"/"expansionLoc".
            let l = loc.get("line").or_else(|| loc.get("expansionLoc").and_then(|e| e.get("line")));
            if let Some(l) = l.and_then(Value::as_u64) {
                *line = Some(l);
            }
        }
        let is_cast = matches!(node.get("kind").and_then(Value::as_str), Some("ImplicitCastExpr" | "CStyleCastExpr"));
        if is_cast && node.get("castKind").and_then(Value::as_str) == Some("IntegralToFloating") {
            let to_half = json_type(node).is_some_and(|(_, c)| strip_qualifiers(&c) == "__fp16");
            let from = node.get("inner").and_then(Value::as_array).and_then(|i| i.first()).and_then(json_type);
            if to_half && from.is_some_and(|(_, c)| matches!(strip_qualifiers(&c), "short" | "unsigned short")) {
                found.push(*line);
            }
        }
        if let Some(end) = node.get("range").and_then(|r| r.get("end")).and_then(|e| e.get("line")).and_then(Value::as_u64) {
            *line = Some(end);
        }
        for child in node.get("inner").and_then(Value::as_array).map_or(&[][..], Vec::as_slice) {
            walk(child, line, found);
        }
    }
    let mut found = Vec::new();
    for decl in dump_objects(dump) {
        let decl = decl?;
        if decl.get("kind").and_then(Value::as_str) == Some("FunctionDecl") && decl.get("name").and_then(Value::as_str) == Some(name) {
            walk(&decl, &mut None, &mut found);
        }
    }
    Ok(found)
}

pub(crate) fn strip_qualifiers(t: &str) -> &str {
    let mut t = t.trim();
    loop {
        if let Some(r) = t.strip_prefix("const ") {
            t = r.trim_start();
        } else if let Some(r) = t.strip_prefix("volatile ") {
            t = r.trim_start();
        } else {
            return t;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_ast_dump_finds_the_definition() {
        // The shape clang-19 writes for `typedef unsigned u32; void k(const float *x, u32 n);
        // void kk(void); void k(const float *x, u32 n) {}` filtered by "k".
        let dump = br#"{"kind": "FunctionDecl", "name": "k", "type": {"qualType": "void (const float *, u32)", "desugaredQualType": "void (const float *, unsigned int)"},
              "inner": [{"kind": "ParmVarDecl", "name": "x", "type": {"qualType": "const float *"}},
                        {"kind": "ParmVarDecl", "name": "n", "type": {"qualType": "u32", "desugaredQualType": "unsigned int"}}]}
            {"kind": "FunctionDecl", "name": "kk", "type": {"qualType": "void (void)"}, "inner": [{"kind": "CompoundStmt"}]}
            {"kind": "FunctionDecl", "name": "k", "previousDecl": "0x1", "type": {"qualType": "void (const float *, u32)"},
              "inner": [{"kind": "ParmVarDecl", "name": "x", "type": {"qualType": "const float *"}},
                        {"kind": "ParmVarDecl", "name": "n", "type": {"qualType": "u32", "desugaredQualType": "unsigned int"}},
                        {"kind": "CompoundStmt"}]}"#;
        let p = |w: &str, c: &str| ParamType { written: w.into(), canonical: c.into() };
        assert_eq!(
            kernel_params(dump, "k"),
            Ok(KernelLookup::Defined(vec![p("const float *", "const float *"), p("u32", "unsigned int")], "void".into()))
        );
        assert_eq!(kernel_params(dump, "kk"), Ok(KernelLookup::Defined(vec![], "void".into())));
        // Only the declaration: declared, not defined.
        let declared = br#"{"kind": "FunctionDecl", "name": "k", "type": {"qualType": "void (float *)"},
              "inner": [{"kind": "ParmVarDecl", "name": "x", "type": {"qualType": "float *"}}]}"#;
        assert_eq!(kernel_params(declared, "k"), Ok(KernelLookup::Declared));
        // A variable of the name is not the function.
        assert_eq!(kernel_params(br#"{"kind": "VarDecl", "name": "k", "type": {"qualType": "int"}}"#, "k"), Ok(KernelLookup::Missing));
        assert_eq!(kernel_params(b"", "k"), Ok(KernelLookup::Missing));
        assert!(kernel_params(b"Dumping k:\nFunctionDecl 0x1 <k.c:1:1> k 'void ()'", "k").unwrap_err().contains("does not parse"));
        // An expression nested 5000 levels deep (tinygrad's losses nest hundreds): read on the
        // AST stack without serde_json's 128-level limit.
        let mut deep = String::from(
            r#"{"kind": "FunctionDecl", "name": "k", "type": {"qualType": "void (float *)"}, "inner": [{"kind": "ParmVarDecl", "type": {"qualType": "float *"}}, {"kind": "CompoundStmt", "inner": ["#,
        );
        for _ in 0..5000 {
            deep.push_str(r#"{"kind": "ParenExpr", "inner": ["#);
        }
        deep.push_str(r#"{"kind": "IntegerLiteral"}"#);
        for _ in 0..5000 {
            deep.push_str("]}");
        }
        deep.push_str("]}]}");
        let (lookup, casts) = on_ast_stack(|| (kernel_params(deep.as_bytes(), "k"), short_to_half_casts(deep.as_bytes(), "k")));
        assert_eq!(
            lookup,
            Ok(KernelLookup::Defined(vec![ParamType { written: "float *".into(), canonical: "float *".into() }], "void".into()))
        );
        assert_eq!(casts, Ok(vec![]));
        assert!(kernel_params(br#"{"kind": "FunctionDecl", "name": "k"}"#, "k").unwrap_err().contains("no type"));
    }

    #[test]
    fn short_to_half_conversions_are_found_with_their_lines() {
        // The shape clang-19 writes (trimmed) for `typedef __fp16 half; void k(half *o, short s,
        // int i) { o[0] = s; o[1] = i; }`: line 2 once, then omitted while it does not change.
        let dump = br#"{"kind": "FunctionDecl", "name": "k", "loc": {"line": 1}, "type": {"qualType": "void (half *, short, int)"},
              "inner": [{"kind": "CompoundStmt", "range": {"begin": {"line": 2}, "end": {}}, "inner": [
                {"kind": "BinaryOperator", "inner": [
                  {"kind": "ImplicitCastExpr", "castKind": "IntegralToFloating", "type": {"qualType": "half", "desugaredQualType": "__fp16"},
                   "inner": [{"kind": "ImplicitCastExpr", "castKind": "LValueToRValue", "type": {"qualType": "short"}}]}]},
                {"kind": "BinaryOperator", "range": {"begin": {"line": 3}}, "inner": [
                  {"kind": "ImplicitCastExpr", "castKind": "IntegralToFloating", "type": {"qualType": "half", "desugaredQualType": "__fp16"},
                   "inner": [{"kind": "ImplicitCastExpr", "type": {"qualType": "int"}}]},
                  {"kind": "CStyleCastExpr", "castKind": "IntegralToFloating", "type": {"qualType": "const __fp16"},
                   "inner": [{"kind": "DeclRefExpr", "type": {"qualType": "u16", "desugaredQualType": "unsigned short"}}]}]}]}]}"#;
        assert_eq!(short_to_half_casts(dump, "k"), Ok(vec![Some(2), Some(3)]));
        assert_eq!(short_to_half_casts(dump, "other"), Ok(vec![]));
        assert!(short_to_half_casts(b"{", "k").is_err());
    }
}
