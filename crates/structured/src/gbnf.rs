//! GBNF, llama.cpp's grammar format, rewritten as the Lark grammar llguidance compiles.
//!
//! GBNF (llama.cpp `grammars/README.md`): rules `name ::= alternatives`, `root` the start;
//! terminals are `"literals"` (escapes `\n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH`), character
//! classes `[a-z]` / `[^...]` and `.` (any character); `( )` groups, `*` `+` `?` and `{m}`
//! `{m,}` `{m,n}` repeat; `#` starts a comment. A rule ends where the next `name ::=` begins.
//!
//! In Lark every GBNF rule becomes a rule (lowercase) named `g_` plus an injective spelling of
//! the GBNF name, literals become JSON-escaped strings and classes `/[...]/` regexes, so the
//! language is the same: the lexer's lexemes are exactly GBNF's terminals.

use std::fmt::Write;

use crate::StructuredError;

/// The Lark grammar with the language of the GBNF grammar `src`.
pub fn to_lark(src: &str) -> Result<String, StructuredError> {
    let mut p = Parser {
        s: src.as_bytes(),
        src,
        i: 0,
        refs: Vec::new(),
    };
    let mut rules: Vec<(String, String)> = Vec::new();
    p.skip_space();
    while p.i < p.s.len() {
        let name = p.name()?;
        p.skip_space();
        if !p.eat("::=") {
            return Err(p.error(format!("expected '::=' after the rule name '{name}'")));
        }
        let body = p.alternatives(0)?;
        if rules.iter().any(|(n, _)| *n == name) {
            return Err(p.error(format!("the rule '{name}' is defined twice")));
        }
        rules.push((name, body));
        p.skip_space();
    }
    if !rules.iter().any(|(n, _)| n == "root") {
        return Err(StructuredError::Grammar(
            "the GBNF grammar has no 'root' rule".into(),
        ));
    }
    for r in &p.refs {
        if !rules.iter().any(|(n, _)| n == r) {
            return Err(StructuredError::Grammar(format!(
                "the GBNF grammar uses the rule '{r}' but does not define it"
            )));
        }
    }
    let mut out = format!("start: {}\n", rule_name("root"));
    for (name, body) in &rules {
        let _ = writeln!(out, "{}: {body}", rule_name(name));
    }
    Ok(out)
}

/// `g_` and the GBNF name spelled in `[a-z0-9_]` one-to-one: `_` as `__`, `-` as `_d`, an
/// uppercase letter as `_u` and the letter.
fn rule_name(gbnf: &str) -> String {
    let mut s = String::from("g_");
    for c in gbnf.chars() {
        match c {
            'a'..='z' | '0'..='9' => s.push(c),
            '_' => s.push_str("__"),
            '-' => s.push_str("_d"),
            'A'..='Z' => {
                s.push_str("_u");
                s.push(c.to_ascii_lowercase());
            }
            _ => unreachable!("GBNF names are checked"),
        }
    }
    s
}

struct Parser<'a> {
    s: &'a [u8],
    src: &'a str,
    i: usize,
    /// The rule names the bodies use.
    refs: Vec<String>,
}

/// How deep groups may nest (a hostile grammar must not overflow the stack).
const MAX_DEPTH: usize = 64;

impl Parser<'_> {
    fn error(&self, what: String) -> StructuredError {
        let line = self.src[..self.i.min(self.src.len())].matches('\n').count() + 1;
        StructuredError::Grammar(format!("GBNF line {line}: {what}"))
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, t: &str) -> bool {
        if self.s[self.i..].starts_with(t.as_bytes()) {
            self.i += t.len();
            true
        } else {
            false
        }
    }

    /// Skips spaces, newlines and comments.
    fn skip_space(&mut self) {
        while let Some(c) = self.peek() {
            match c {
                b' ' | b'\t' | b'\r' | b'\n' => self.i += 1,
                b'#' => {
                    while self.peek().is_some_and(|c| c != b'\n') {
                        self.i += 1;
                    }
                }
                _ => break,
            }
        }
    }

    fn is_name_byte(c: u8) -> bool {
        c.is_ascii_alphanumeric() || c == b'-' || c == b'_'
    }

    fn name(&mut self) -> Result<String, StructuredError> {
        let start = self.i;
        while self.peek().is_some_and(Self::is_name_byte) {
            self.i += 1;
        }
        if start == self.i {
            return Err(self.error("expected a rule name".into()));
        }
        Ok(self.src[start..self.i].to_string())
    }

    /// Whether a rule definition (`name ::=`) starts here.
    fn at_definition(&self) -> bool {
        let mut j = self.i;
        while j < self.s.len() && Self::is_name_byte(self.s[j]) {
            j += 1;
        }
        if j == self.i {
            return false;
        }
        while j < self.s.len() && matches!(self.s[j], b' ' | b'\t') {
            j += 1;
        }
        self.s[j..].starts_with(b"::=")
    }

    /// `seq ( "|" seq )*`, up to `)` (nested) or the next definition (top level).
    fn alternatives(&mut self, depth: usize) -> Result<String, StructuredError> {
        if depth > MAX_DEPTH {
            return Err(self.error(format!("groups nest deeper than {MAX_DEPTH}")));
        }
        let mut alts = vec![self.sequence(depth)?];
        while self.eat("|") {
            alts.push(self.sequence(depth)?);
        }
        Ok(alts.join(" | "))
    }

    fn sequence(&mut self, depth: usize) -> Result<String, StructuredError> {
        let mut items: Vec<String> = Vec::new();
        loop {
            self.skip_space();
            let Some(c) = self.peek() else { break };
            let item = match c {
                b'|' | b')' => break,
                _ if depth == 0 && self.at_definition() => break,
                b'"' => self.literal()?,
                b'[' => self.class()?,
                b'.' => {
                    self.i += 1;
                    r"/(?s:.)/".to_string()
                }
                b'(' => {
                    self.i += 1;
                    let inner = self.alternatives(depth + 1)?;
                    self.skip_space();
                    if !self.eat(")") {
                        return Err(self.error("a group '(' is not closed".into()));
                    }
                    format!("({inner})")
                }
                c if Self::is_name_byte(c) => {
                    let name = self.name()?;
                    let lark = rule_name(&name);
                    self.refs.push(name);
                    lark
                }
                b'*' | b'+' | b'?' | b'{' => {
                    return Err(self.error("a repetition follows nothing".into()))
                }
                _ => {
                    return Err(self.error(format!(
                        "unexpected character '{}'",
                        self.src[self.i..].chars().next().unwrap_or('?')
                    )))
                }
            };
            items.push(self.repetition(item)?);
        }
        Ok(if items.is_empty() {
            "\"\"".to_string()
        } else {
            items.join(" ")
        })
    }

    /// `item` with the repetitions that follow it.
    fn repetition(&mut self, mut item: String) -> Result<String, StructuredError> {
        loop {
            match self.peek() {
                Some(op @ (b'*' | b'+' | b'?')) => {
                    self.i += 1;
                    item = format!("({item}){}", op as char);
                }
                Some(b'{') => {
                    self.i += 1;
                    let min = self.number()?;
                    let max = if self.eat(",") {
                        self.skip_blanks();
                        if self.peek() == Some(b'}') {
                            None
                        } else {
                            Some(self.number()?)
                        }
                    } else {
                        Some(min)
                    };
                    self.skip_blanks();
                    if !self.eat("}") {
                        return Err(self.error("a repetition '{' is not closed".into()));
                    }
                    if max.is_some_and(|m| m < min) {
                        return Err(self.error(format!(
                            "the repetition {{{min},{}}} has max < min",
                            max.unwrap_or(0)
                        )));
                    }
                    item = match max {
                        Some(m) => format!("({item}){{{min},{m}}}"),
                        None => format!("({item}){{{min},}}"),
                    };
                }
                _ => return Ok(item),
            }
        }
    }

    fn skip_blanks(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
    }

    fn number(&mut self) -> Result<u32, StructuredError> {
        self.skip_blanks();
        let start = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        self.src[start..self.i]
            .parse()
            .map_err(|_| self.error("expected a number in a repetition".into()))
    }

    /// One character of a literal or class, escapes decoded.
    fn char(&mut self) -> Result<char, StructuredError> {
        let rest = &self.src[self.i..];
        let c = rest
            .chars()
            .next()
            .ok_or_else(|| self.error("the grammar ends inside a literal".into()))?;
        self.i += c.len_utf8();
        if c != '\\' {
            return Ok(c);
        }
        let e = self
            .peek()
            .ok_or_else(|| self.error("the grammar ends inside an escape".into()))?;
        self.i += 1;
        let hex = |p: &mut Self, n: usize| -> Result<char, StructuredError> {
            let digits = p.src.get(p.i..p.i + n).unwrap_or("");
            let v = u32::from_str_radix(digits, 16)
                .ok()
                .filter(|_| digits.len() == n)
                .and_then(char::from_u32)
                .ok_or_else(|| p.error(format!("a bad escape '\\{}{digits}'", e as char)))?;
            p.i += n;
            Ok(v)
        };
        match e {
            b'n' => Ok('\n'),
            b'r' => Ok('\r'),
            b't' => Ok('\t'),
            b'x' => hex(self, 2),
            b'u' => hex(self, 4),
            b'U' => hex(self, 8),
            b'\\' | b'"' | b'[' | b']' | b'-' | b'^' => Ok(e as char),
            _ => Err(self.error(format!("an unknown escape '\\{}'", e as char))),
        }
    }

    fn literal(&mut self) -> Result<String, StructuredError> {
        self.i += 1;
        let mut text = String::new();
        loop {
            match self.peek() {
                None => return Err(self.error("a literal is not closed".into())),
                Some(b'"') => {
                    self.i += 1;
                    break;
                }
                Some(_) => text.push(self.char()?),
            }
        }
        Ok(serde_json::to_string(&text).expect("a string serializes"))
    }

    fn class(&mut self) -> Result<String, StructuredError> {
        self.i += 1;
        let mut rx = String::from("[");
        if self.eat("^") {
            rx.push('^');
        }
        let mut empty = true;
        loop {
            match self.peek() {
                None => return Err(self.error("a character class is not closed".into())),
                Some(b']') => {
                    self.i += 1;
                    break;
                }
                Some(_) => {
                    let lo = self.char()?;
                    push_class_char(&mut rx, lo);
                    if self.peek() == Some(b'-') && self.s.get(self.i + 1) != Some(&b']') {
                        self.i += 1;
                        let hi = self.char()?;
                        if hi < lo {
                            return Err(
                                self.error(format!("the class range '{lo}-{hi}' is reversed"))
                            );
                        }
                        rx.push('-');
                        push_class_char(&mut rx, hi);
                    }
                    empty = false;
                }
            }
        }
        if empty {
            return Err(self.error("an empty character class".into()));
        }
        rx.push(']');
        Ok(format!("/{rx}/"))
    }
}

/// `c` inside a regex class, escaped where the regex or the Lark `/.../` would read it.
fn push_class_char(rx: &mut String, c: char) {
    match c {
        '\\' | ']' | '[' | '^' | '-' | '/' | '&' | '~' => {
            rx.push('\\');
            rx.push(c);
        }
        '\n' => rx.push_str("\\n"),
        '\r' => rx.push_str("\\r"),
        '\t' => rx.push_str("\\t"),
        c if (c as u32) < 0x20 || c == '\u{7f}' => {
            let _ = write!(rx, "\\x{{{:x}}}", c as u32);
        }
        c => rx.push(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_literals_classes_and_repetitions() {
        let g = r#"
            # a comment
            root ::= greeting (" " name)? "!"{1,3}
            greeting ::= "hi" | "hello\n"
            name ::= [A-Z] [a-z-]* first-name
            first-name ::= "x" .
        "#;
        let lark = to_lark(g).unwrap();
        assert!(lark.starts_with("start: g_root\n"), "{lark}");
        assert!(lark.contains(r#"g_greeting: "hi" | "hello\n""#), "{lark}");
        assert!(
            lark.contains(r"g_name: /[A-Z]/ (/[a-z\-]/)* g_first_dname"),
            "{lark}"
        );
        assert!(lark.contains(r#"("!"){1,3}"#), "{lark}");
    }

    #[test]
    fn names_spell_one_to_one() {
        let names = ["a-b", "a_b", "aB", "ab", "a_db", "a__b", "A-b_C", "a_ub"];
        let lark: std::collections::HashSet<String> = names.iter().map(|n| rule_name(n)).collect();
        assert_eq!(lark.len(), names.len(), "{lark:?}");
    }

    #[test]
    fn bad_grammars_name_the_problem() {
        let cases = [
            ("root ::= \"a", "not closed"),
            ("root ::= missing", "does not define"),
            ("start ::= \"a\"", "no 'root' rule"),
            ("root ::= [z-a]", "reversed"),
            ("root ::= \"a\"{3,1}", "max < min"),
            ("root ::= *", "follows nothing"),
            ("root ::= \"\\q\"", "unknown escape"),
            ("root \"a\"", "expected '::='"),
            ("root ::= \"a\"\nroot ::= \"b\"", "defined twice"),
        ];
        for (g, want) in cases {
            let e = to_lark(g).unwrap_err().to_string();
            assert!(e.contains(want), "{g:?}: {e}");
        }
        let deep = format!("root ::= {}\"a\"{}", "(".repeat(100), ")".repeat(100));
        assert!(to_lark(&deep).unwrap_err().to_string().contains("nest"));
    }
}
