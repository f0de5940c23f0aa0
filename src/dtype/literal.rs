//! A parser for the small subset of Python literals an NPY header may contain: dicts, lists,
//! tuples, strings, integers, `True`/`False`/`None`, written as Python writes them (comments,
//! line continuations, adjacent strings joined, raw and triple-quoted strings, octal escapes).
//! Nothing is ever evaluated; anything else (calls, names, operators) is a syntax error.
//! Written by hand because no crate parses Python literal syntax; numpy's own reader is
//! `ast.literal_eval`, and what it accepts of this subset is accepted here.

use std::fmt;

/// Deepest nesting accepted; keeps a hostile header from exhausting the stack.
const MAX_DEPTH: usize = 32;

/// A Python literal, as [`parse`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Literal {
    /// A `str`, escapes decoded and adjacent strings joined (bytes literals are refused).
    Str(String),
    /// An integer; one that does not fit in an `i128` is a syntax error.
    Int(i128),
    /// `True` or `False`.
    Bool(bool),
    /// `None`.
    None,
    /// A tuple's items, in order.
    Tuple(Vec<Literal>),
    /// A list's items, in order.
    List(Vec<Literal>),
    /// A dict's `(key, value)` pairs in the order written; a repeated key is kept twice.
    Dict(Vec<(Literal, Literal)>),
}

impl Literal {
    /// The string, if this is a [`Literal::Str`].
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Literal::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The Python type's name (`"str"`, `"dict"`, ...), for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Literal::Str(_) => "str",
            Literal::Int(_) => "int",
            Literal::Bool(_) => "bool",
            Literal::None => "None",
            Literal::Tuple(_) => "tuple",
            Literal::List(_) => "list",
            Literal::Dict(_) => "dict",
        }
    }
}

/// Python-repr-like rendering, used for messages and as a stable cache key.
impl fmt::Display for Literal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn seq(f: &mut fmt::Formatter<'_>, items: &[Literal]) -> fmt::Result {
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{item}")?;
            }
            Ok(())
        }
        match self {
            Literal::Str(s) => write!(f, "{s:?}"),
            Literal::Int(i) => write!(f, "{i}"),
            Literal::Bool(true) => f.write_str("True"),
            Literal::Bool(false) => f.write_str("False"),
            Literal::None => f.write_str("None"),
            Literal::Tuple(items) => {
                f.write_str("(")?;
                seq(f, items)?;
                if items.len() == 1 {
                    f.write_str(",")?;
                }
                f.write_str(")")
            }
            Literal::List(items) => {
                f.write_str("[")?;
                seq(f, items)?;
                f.write_str("]")
            }
            Literal::Dict(items) => {
                f.write_str("{")?;
                for (i, (k, v)) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k}: {v}")?;
                }
                f.write_str("}")
            }
        }
    }
}

/// Parses `text` as exactly one literal, surrounded by optional whitespace.
pub fn parse(text: &str) -> Result<Literal, String> {
    let mut p = Parser {
        s: text.as_bytes(),
        text,
        pos: 0,
    };
    let value = p.value(0)?;
    p.skip_ws();
    if p.pos != p.s.len() {
        return Err(p.err("unexpected text after the literal"));
    }
    Ok(value)
}

struct Parser<'a> {
    s: &'a [u8],
    text: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn err(&self, what: &str) -> String {
        format!("{what} at offset {}", self.pos)
    }

    /// Skips what Python's tokenizer skips between tokens: blanks (form feed too), newlines
    /// (inside the header's brackets they are not significant), `#` comments to the end of
    /// the line, and backslash line continuations.
    fn skip_ws(&mut self) {
        while let Some(c) = self.peek() {
            match c {
                b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' => self.pos += 1,
                b'#' => {
                    while self.peek().is_some_and(|c| c != b'\n' && c != b'\r') {
                        self.pos += 1;
                    }
                }
                b'\\' if self.s.get(self.pos + 1) == Some(&b'\n') => self.pos += 2,
                b'\\' if self.s.get(self.pos + 1..self.pos + 3) == Some(b"\r\n") => self.pos += 3,
                _ => break,
            }
        }
    }

    /// Whether a string literal starts here, and the length of its prefix (`u`, `r`, `R`, ...).
    fn string_start(&self) -> Option<usize> {
        let mut i = self.pos;
        while i < self.s.len() && i - self.pos < 2 && self.s[i].is_ascii_alphabetic() {
            i += 1;
        }
        let prefix = &self.text[self.pos..i];
        let known = matches!(
            prefix.to_ascii_lowercase().as_str(),
            "" | "u" | "r" | "b" | "br" | "rb"
        );
        (known && matches!(self.s.get(i), Some(b'\'' | b'"'))).then_some(i - self.pos)
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn value(&mut self, depth: usize) -> Result<Literal, String> {
        if depth > MAX_DEPTH {
            return Err(self.err("literal nested too deeply"));
        }
        self.skip_ws();
        match self.peek() {
            None => Err(self.err("unexpected end of header")),
            Some(b'{') => self.dict(depth),
            Some(b'[') => Ok(Literal::List(self.items(b'[', b']', depth)?.0)),
            Some(b'(') => {
                let (items, trailing_comma) = self.items(b'(', b')', depth)?;
                if items.len() == 1 && !trailing_comma {
                    // `(x)` is just a parenthesised `x`, as in Python.
                    Ok(items.into_iter().next().expect("one item"))
                } else {
                    Ok(Literal::Tuple(items))
                }
            }
            Some(_) if self.string_start().is_some() => self.strings().map(Literal::Str),
            Some(b'-' | b'+' | b'0'..=b'9') => self.int(),
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => {
                let start = self.pos;
                while self
                    .peek()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
                {
                    self.pos += 1;
                }
                match &self.text[start..self.pos] {
                    "True" => Ok(Literal::Bool(true)),
                    "False" => Ok(Literal::Bool(false)),
                    "None" => Ok(Literal::None),
                    name => Err(format!(
                        "name {name:?} is not a literal (only literals are accepted) at offset {start}"
                    )),
                }
            }
            Some(_) => Err(self.err("expected a literal")),
        }
    }

    /// Comma-separated values between `open` and `close`; also says whether a comma trailed.
    fn items(&mut self, open: u8, close: u8, depth: usize) -> Result<(Vec<Literal>, bool), String> {
        debug_assert_eq!(self.peek(), Some(open));
        self.pos += 1;
        let mut items = Vec::new();
        let mut trailing_comma = false;
        loop {
            self.skip_ws();
            if self.peek() == Some(close) {
                self.pos += 1;
                return Ok((items, trailing_comma));
            }
            items.push(self.value(depth + 1)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    trailing_comma = true;
                }
                Some(c) if c == close => {
                    trailing_comma = false;
                }
                _ => return Err(self.err("expected ',' or a closing bracket")),
            }
        }
    }

    fn dict(&mut self, depth: usize) -> Result<Literal, String> {
        self.pos += 1;
        let mut items = Vec::new();
        loop {
            self.skip_ws();
            if self.peek() == Some(b'}') {
                self.pos += 1;
                return Ok(Literal::Dict(items));
            }
            let key = self.value(depth + 1)?;
            self.skip_ws();
            if self.peek() != Some(b':') {
                return Err(self.err("expected ':' in dict"));
            }
            self.pos += 1;
            let value = self.value(depth + 1)?;
            items.push((key, value));
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {}
                _ => return Err(self.err("expected ',' or '}' in dict")),
            }
        }
    }

    fn int(&mut self) -> Result<Literal, String> {
        let start = self.pos;
        let negative = match self.peek() {
            Some(b'-') => {
                self.pos += 1;
                true
            }
            Some(b'+') => {
                self.pos += 1;
                false
            }
            _ => false,
        };
        self.skip_ws();
        let digits_start = self.pos;
        // Python's integer literals, as `ast.literal_eval` (so numpy) reads them: decimal
        // without leading zeros (but `0`, `00`), or 0x / 0o / 0b; single `_` between digits.
        let radix: u32 = match (self.peek(), self.s.get(self.pos + 1).copied()) {
            (Some(b'0'), Some(b'x' | b'X')) => 16,
            (Some(b'0'), Some(b'o' | b'O')) => 8,
            (Some(b'0'), Some(b'b' | b'B')) => 2,
            _ => 10,
        };
        if radix != 10 {
            self.pos += 2;
        }
        let mut value: i128 = 0;
        let mut digits = 0usize;
        let mut nonzero_lead = false;
        let mut after_underscore = radix != 10; // `0x_1` is valid, `0x1_` is not
        loop {
            match self.peek() {
                Some(b'_') if digits > 0 || radix != 10 => {
                    if after_underscore && digits > 0 {
                        return Err(self.err("invalid integer literal ('__')"));
                    }
                    after_underscore = true;
                    self.pos += 1;
                    continue;
                }
                Some(c) if (c as char).is_digit(radix) => {
                    let d = (c as char).to_digit(radix).expect("a digit");
                    if radix == 10 && digits > 0 && value == 0 && d != 0 {
                        nonzero_lead = true;
                    }
                    value = value
                        .checked_mul(i128::from(radix))
                        .and_then(|v| v.checked_add(i128::from(d)))
                        .ok_or_else(|| self.err("integer too large"))?;
                    digits += 1;
                    after_underscore = false;
                    self.pos += 1;
                }
                _ => break,
            }
        }
        if after_underscore && (digits > 0 || radix != 10) {
            return Err(self.err("invalid integer literal (trailing '_')"));
        }
        if digits == 0 && radix == 10 {
            self.pos = start;
            return Err(self.err("expected a literal"));
        }
        if digits == 0 {
            return Err(self.err("invalid integer literal (no digits)"));
        }
        if nonzero_lead || (radix == 10 && self.s[digits_start] == b'0' && value != 0) {
            return Err(self.err(
                "leading zeros in decimal integer literals are not permitted (as in Python)",
            ));
        }
        // Python 2 wrote longs as `3L`; numpy still reads such version 1.0 headers.
        if matches!(self.peek(), Some(b'L' | b'l')) {
            self.pos += 1;
        }
        if self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'.' || c == b'_')
        {
            return Err(self.err("only integer literals are accepted"));
        }
        Ok(Literal::Int(if negative { -value } else { value }))
    }

    /// One or more adjacent string literals, joined as Python joins them (`'<' 'f4'`).
    fn strings(&mut self) -> Result<String, String> {
        let mut out = self.string()?;
        loop {
            let after = self.pos;
            self.skip_ws();
            if self.string_start().is_none() {
                self.pos = after;
                return Ok(out);
            }
            out.push_str(&self.string()?);
        }
    }

    fn string(&mut self) -> Result<String, String> {
        let prefix_len = self.string_start().expect("at a string");
        let prefix = self.text[self.pos..self.pos + prefix_len].to_ascii_lowercase();
        if prefix.contains('b') {
            // A bytes literal: numpy refuses it as 'descr' too.
            return Err(self.err("a bytes literal is not a str"));
        }
        let raw = prefix.contains('r');
        self.pos += prefix_len;
        let quote = self.s[self.pos];
        let triple = self.s.get(self.pos..self.pos + 3) == Some(&[quote; 3][..]);
        self.pos += if triple { 3 } else { 1 };
        let mut out = String::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(self.err("unterminated string"));
            };
            if c == quote
                && (!triple || self.s.get(self.pos..self.pos + 3) == Some(&[quote; 3][..]))
            {
                self.pos += if triple { 3 } else { 1 };
                return Ok(out);
            }
            if c == b'\n' && !triple {
                return Err(self.err("newline in string"));
            }
            if c != b'\\' {
                // Copy a run of plain characters at once (keeps multi-byte UTF-8 intact).
                let start = self.pos;
                self.pos += 1;
                while self
                    .peek()
                    .is_some_and(|c| c != quote && c != b'\\' && (triple || c != b'\n'))
                {
                    self.pos += 1;
                }
                out.push_str(&self.text[start..self.pos]);
                continue;
            }
            self.pos += 1;
            let Some(e) = self.peek() else {
                return Err(self.err("unterminated escape"));
            };
            if raw {
                // A raw string keeps the backslash; it only stops a quote from ending it.
                out.push('\\');
                let start = self.pos;
                self.pos += self.text[start..].chars().next().map_or(1, char::len_utf8);
                out.push_str(&self.text[start..self.pos]);
                continue;
            }
            self.pos += 1;
            match e {
                b'\n' => {} // a continued line
                b'\\' => out.push('\\'),
                b'\'' => out.push('\''),
                b'"' => out.push('"'),
                b'n' => out.push('\n'),
                b't' => out.push('\t'),
                b'r' => out.push('\r'),
                b'a' => out.push('\x07'),
                b'b' => out.push('\x08'),
                b'f' => out.push('\x0c'),
                b'v' => out.push('\x0b'),
                b'0'..=b'7' => {
                    // Up to three octal digits.
                    let mut code = u32::from(e - b'0');
                    for _ in 0..2 {
                        match self.peek() {
                            Some(d @ b'0'..=b'7') => {
                                code = code * 8 + u32::from(d - b'0');
                                self.pos += 1;
                            }
                            _ => break,
                        }
                    }
                    out.push(char::from_u32(code).expect("at most 0o777"));
                }
                b'x' => out.push(self.hex_escape(2)?),
                b'u' => out.push(self.hex_escape(4)?),
                b'U' => out.push(self.hex_escape(8)?),
                b'N' => return Err(self.err("named escapes are not supported")),
                _ => {
                    // Python keeps an unknown escape as it is (with a warning).
                    self.pos -= 1;
                    out.push('\\');
                }
            }
        }
    }

    fn hex_escape(&mut self, digits: usize) -> Result<char, String> {
        let hex = self
            .text
            .get(self.pos..self.pos + digits)
            .ok_or_else(|| self.err("truncated escape"))?;
        let code = u32::from_str_radix(hex, 16).map_err(|_| self.err("bad hex escape"))?;
        self.pos += digits;
        char::from_u32(code).ok_or_else(|| self.err("escape is not a character"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_numpy_header() {
        let h = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }          \n";
        let lit = parse(h).unwrap();
        let Literal::Dict(items) = lit else { panic!() };
        assert_eq!(items[0].1, Literal::Str("<f4".into()));
        assert_eq!(items[1].1, Literal::Bool(false));
        assert_eq!(
            items[2].1,
            Literal::Tuple(vec![Literal::Int(3), Literal::Int(4)])
        );
    }

    #[test]
    fn tuples_and_parentheses() {
        assert_eq!(parse("()").unwrap(), Literal::Tuple(vec![]));
        assert_eq!(
            parse("(5,)").unwrap(),
            Literal::Tuple(vec![Literal::Int(5)])
        );
        assert_eq!(parse("(5)").unwrap(), Literal::Int(5));
        assert_eq!(parse("(3L, 4L)").unwrap().to_string(), "(3, 4)");
    }

    #[test]
    fn strings_and_escapes() {
        assert_eq!(parse(r"'a\'b'").unwrap(), Literal::Str("a'b".into()));
        assert_eq!(parse(r#""\u00e9\x41""#).unwrap(), Literal::Str("éA".into()));
        assert_eq!(parse("'héllo'").unwrap(), Literal::Str("héllo".into()));
    }

    #[test]
    fn rejects_code() {
        for bad in [
            "__import__('os')",
            "{'a': f(1)}",
            "1 + 2",
            "{'a': 1.5}",
            "[1, 2",
            "'abc",
            "x",
        ] {
            assert!(parse(bad).is_err(), "{bad} should be rejected");
        }
    }

    /// What `ast.literal_eval` (so `numpy.load`) accepts beyond the plain repr.
    #[test]
    fn python_syntax_numpy_accepts() {
        let want = "{'descr': '<f4', 'fortran_order': False, 'shape': (6,)}";
        for text in [
            "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), } # a comment",
            "{'descr': '<f4', # a comment\n 'fortran_order': False, 'shape': (6,), }",
            "{'descr': '<' 'f4', 'fortran_order': False, 'shape': (6,), }",
            "{'descr': r'<f4', 'fortran_order': False, 'shape': (6,), }",
            "{'descr': '''<f4''', 'fortran_order': False, 'shape': (6,), }",
            "{'descr': '<f4', 'fortran_order': False, \\\n'shape': (6,), }",
            "({'descr': \"<\" R'f4', 'fortran_order': False, 'shape': (0x6,), })\x0c\t#x\n#y",
            "{'descr': '\\074f4', 'fortran_order': False, 'shape': (6,), }",
        ] {
            assert_eq!(
                parse(text).map(|l| l.to_string()),
                Ok(want.replace('\'', "\"")),
                "{text:?}"
            );
        }
        assert_eq!(parse(r"r'a\'b'"), Ok(Literal::Str(r"a\'b".into())));
        assert_eq!(parse(r"'a\qb'"), Ok(Literal::Str(r"a\qb".into())));
        assert_eq!(parse("'''a\nb'''"), Ok(Literal::Str("a\nb".into())));
        for bad in ["b'<f4'", "f'<f4'", "'a' b'c'", "'a' 'b"] {
            assert!(parse(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn rejects_deep_nesting() {
        let deep = "(".repeat(1000) + &")".repeat(1000);
        assert!(parse(&deep).unwrap_err().contains("nested"));
    }

    #[test]
    fn integers_follow_python() {
        // What `ast.literal_eval` accepts (so numpy's header parser), and what it refuses.
        for (text, want) in [
            ("0", 0),
            ("00", 0),
            ("000", 0),
            ("1_000", 1000),
            ("0x1F", 31),
            ("0o17", 15),
            ("0b101", 5),
            ("0x_ff", 255),
            ("- 3", -3),
            ("+3", 3),
        ] {
            assert_eq!(parse(text), Ok(Literal::Int(want)), "{text}");
        }
        for bad in [
            "03", "(3,03)", "-03", "007", "1__0", "1_", "0x", "0b2", "0o8", "3e5", "3.0",
        ] {
            assert!(parse(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn integer_overflow_is_an_error() {
        assert!(parse("123456789012345678901234567890123456789012345").is_err());
        assert_eq!(parse("-7").unwrap(), Literal::Int(-7));
    }
}
