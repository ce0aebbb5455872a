//! A small JSON writer: the CLI's output shapes are flat and fixed, so a hand-written writer
//! with correct string escaping is all that is needed.

use std::fmt::Write as _;

/// Appends `s` to `out` as a JSON string literal (the runtime's escaping, shared by every
/// report).
pub use crate::replay::json_string as string;

/// Builds a JSON object key by key.
pub struct Object<'a> {
    out: &'a mut String,
    first: bool,
}

impl<'a> Object<'a> {
    /// Opens `{`.
    pub fn new(out: &'a mut String) -> Self {
        out.push('{');
        Object { out, first: true }
    }

    fn key(&mut self, k: &str) -> &mut String {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        string(self.out, k);
        self.out.push(':');
        self.out
    }

    /// A string member.
    pub fn str(&mut self, k: &str, v: &str) -> &mut Self {
        let o = self.key(k);
        string(o, v);
        self
    }

    /// An unsigned number member.
    pub fn num(&mut self, k: &str, v: u64) -> &mut Self {
        let o = self.key(k);
        let _ = write!(o, "{v}");
        self
    }

    /// A float member (non-finite values become null).
    pub fn float(&mut self, k: &str, v: f64) -> &mut Self {
        let o = self.key(k);
        if v.is_finite() {
            let _ = write!(o, "{v}");
        } else {
            o.push_str("null");
        }
        self
    }

    /// A boolean member.
    pub fn bool(&mut self, k: &str, v: bool) -> &mut Self {
        let o = self.key(k);
        o.push_str(if v { "true" } else { "false" });
        self
    }

    /// A member whose value is written by `f` (an object or array).
    pub fn raw(&mut self, k: &str, f: impl FnOnce(&mut String)) -> &mut Self {
        let o = self.key(k);
        f(o);
        self
    }

    /// Closes `}`.
    pub fn end(self) {
        self.out.push('}');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes() {
        let mut s = String::new();
        string(&mut s, "a\"b\\c\n\u{1}é");
        assert_eq!(s, r#""a\"b\\c\n\u0001é""#);
        let mut s = String::new();
        let mut o = Object::new(&mut s);
        o.str("k", "v").num("n", 3);
        o.end();
        assert_eq!(s, r#"{"k":"v","n":3}"#);
    }
}
