//! Which members of an archive are samples ([`Members`]), and what one sample holds: the
//! first selected member decides, a `.npy` header or raw bytes of a given dtype and shape
//! ([`sample_payload`]). The same rules serve a reader of one archive and every shard of
//! many, so that a pattern selects alike in each.

use super::{SamplePayload, ZipIndex};
use crate::dtype::literal::Literal;
use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};

/// Which members of an archive are samples.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Members {
    /// Every member the format keeps by default (all of them for raw samples, those with an
    /// image extension for images).
    #[default]
    All,
    /// Members whose names match a pattern, as Python's `fnmatch.fnmatchcase` matches.
    Pattern(String),
    /// These members, in this order.
    Names(Vec<String>),
}

impl Members {
    /// How the selection reads in a message.
    pub fn describe(&self) -> String {
        match self {
            Members::All => "None".to_string(),
            Members::Pattern(p) => format!("{p:?}"),
            Members::Names(n) => format!("{n:?}"),
        }
    }
}

/// One element of a parsed pattern: each matches one character, but `Star`.
#[derive(Debug)]
enum Token {
    Char(char),
    Any,
    Star,
    /// `[...]`: ranges of characters (a single one as `c..=c`), negated by a leading `!`.
    Set {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

fn parse(pattern: &str) -> Vec<Token> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '*' => {
                if !matches!(tokens.last(), Some(Token::Star)) {
                    tokens.push(Token::Star);
                }
                i += 1;
            }
            '?' => {
                tokens.push(Token::Any);
                i += 1;
            }
            '[' => {
                // As Python's fnmatch: `!` first negates, a `]` right after `[` or `[!` is
                // literal, and a `[` with no closing `]` is a literal `[`.
                let mut j = i + 1;
                if j < chars.len() && chars[j] == '!' {
                    j += 1;
                }
                if j < chars.len() && chars[j] == ']' {
                    j += 1;
                }
                while j < chars.len() && chars[j] != ']' {
                    j += 1;
                }
                if j >= chars.len() {
                    tokens.push(Token::Char('['));
                    i += 1;
                    continue;
                }
                let mut body = &chars[i + 1..j];
                let negated = body.first() == Some(&'!');
                if negated {
                    body = &body[1..];
                }
                let mut ranges = Vec::new();
                let mut k = 0;
                while k < body.len() {
                    if k + 2 < body.len() && body[k + 1] == '-' {
                        // A reversed range (`z-a`) matches nothing, as in Python.
                        if body[k] <= body[k + 2] {
                            ranges.push((body[k], body[k + 2]));
                        }
                        k += 3;
                    } else {
                        ranges.push((body[k], body[k]));
                        k += 1;
                    }
                }
                tokens.push(Token::Set { negated, ranges });
                i = j + 1;
            }
            c => {
                tokens.push(Token::Char(c));
                i += 1;
            }
        }
    }
    tokens
}

fn one(token: &Token, c: char) -> bool {
    match token {
        Token::Char(p) => *p == c,
        Token::Any => true,
        Token::Star => false,
        Token::Set { negated, ranges } => ranges.iter().any(|&(a, b)| a <= c && c <= b) != *negated,
    }
}

/// Whether `name` matches `pattern` as Python's `fnmatch.fnmatchcase` says: `*` any run of
/// characters (`/` included), `?` one, `[seq]`/`[!seq]` one in (or not in) a set, no escapes,
/// case-sensitive. Written here because the glob crates differ from it where users notice
/// (`**`, `{a,b}` and `/` are special to them), and patterns written for zipfile must select
/// the same members.
pub fn fnmatch(pattern: &str, name: &str) -> bool {
    let tokens = parse(pattern);
    let chars: Vec<char> = name.chars().collect();
    // The classic wildcard match: on a mismatch, the last star takes one more character.
    let (mut t, mut c) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while c < chars.len() {
        if t < tokens.len() && !matches!(tokens[t], Token::Star) && one(&tokens[t], chars[c]) {
            t += 1;
            c += 1;
        } else if t < tokens.len() && matches!(tokens[t], Token::Star) {
            star = Some((t, c));
            t += 1;
        } else if let Some((st, sc)) = star {
            t = st + 1;
            c = sc + 1;
            star = Some((st, sc + 1));
        } else {
            return false;
        }
    }
    tokens[t..].iter().all(|tok| matches!(tok, Token::Star))
}

impl ZipIndex {
    /// The positions of the members `members` selects, in sample order: `All` keeps those
    /// `keep` accepts, and `sorted` orders `All` and `Pattern` by name (else archive order).
    /// A pattern matching nothing gives no members (the caller says whether that is an error:
    /// in one archive it is, in one shard of many it is not); a name given twice, or missing,
    /// is an error.
    pub fn select(
        &self,
        members: &Members,
        keep: impl Fn(&str) -> bool,
        sorted: bool,
    ) -> Result<Vec<usize>> {
        let mut chosen: Vec<usize> = match members {
            Members::All => (0..self.len())
                .filter(|&i| keep(self.members()[i].name()))
                .collect(),
            Members::Pattern(p) => (0..self.len())
                .filter(|&i| fnmatch(p, self.members()[i].name()))
                .collect(),
            Members::Names(names) => {
                let mut seen = std::collections::HashSet::new();
                if let Some(twice) = names.iter().find(|n| !seen.insert(n.as_str())) {
                    return Err(Error::new(
                        ErrorKind::InvalidArgument,
                        self.location(),
                        format!("member {twice:?} is named more than once"),
                    ));
                }
                return names.iter().map(|n| self.position(n)).collect();
            }
        };
        if sorted {
            chosen.sort_by(|&a, &b| self.members()[a].name().cmp(self.members()[b].name()));
        }
        Ok(chosen)
    }
}

/// What the samples at `chosen` hold, decided by the first of them: a `.npy` member's
/// header (which `dtype` and `shape`, when given, must repeat), or raw bytes viewed as
/// `dtype` (default `uint8`) in `shape` (default: one dimension, the first member's size).
/// No members: raw, `shape` or `(0,)`. Size limits, method and encryption of the first member
/// are checked here, before any batch allocates for it.
pub fn sample_payload(
    index: &ZipIndex,
    chosen: &[usize],
    reference: usize,
    dtype: Option<DType>,
    shape: Option<Vec<usize>>,
) -> Result<SamplePayload> {
    let item = match &dtype {
        Some(d) => d.clone(),
        None => DType::from_descr(Literal::Str("|u1".into()))
            .map_err(|e| Error::new(ErrorKind::Internal, "", format!("uint8 descr: {e:?}")))?,
    };
    let Some(&first) = chosen.get(reference).or(chosen.first()) else {
        return Ok(SamplePayload::Raw {
            dtype: item,
            shape: shape.unwrap_or_else(|| vec![0]),
        });
    };
    let at = index.member_location(first);
    if index.members()[first].name().ends_with(".npy") {
        if let Some(header) = index.npy_header(first)? {
            if let Some(d) = &dtype {
                if *d != header.dtype {
                    return Err(Error::new(
                        ErrorKind::Inconsistent,
                        at,
                        format!("members hold {}, not {}", header.dtype.descr(), d.descr()),
                    ));
                }
            }
            if let Some(s) = &shape {
                if *s != header.shape {
                    return Err(Error::new(
                        ErrorKind::Inconsistent,
                        at,
                        format!("members have shape {:?}, not {:?}", header.shape, s),
                    ));
                }
            }
            return Ok(SamplePayload::Npy { reference: first });
        }
    }
    // The size comes from the directory: a member that cannot be read (over a limit,
    // encrypted) is an error when it is read, not when the archive is opened.
    let shape = match shape {
        Some(s) => s,
        None => {
            let size = index.members()[first].size();
            let itemsize = item.itemsize() as u64;
            if itemsize == 0 || size % itemsize != 0 {
                return Err(Error::new(
                    ErrorKind::Inconsistent,
                    at,
                    format!(
                        "{size} bytes is not a whole number of {} items",
                        item.descr()
                    ),
                ));
            }
            vec![usize::try_from(size / itemsize).unwrap_or(usize::MAX)]
        }
    };
    Ok(SamplePayload::Raw { dtype: item, shape })
}

#[cfg(test)]
mod tests {
    use super::fnmatch;

    #[test]
    fn patterns_match_as_pythons_fnmatchcase() {
        // (pattern, name, fnmatch.fnmatchcase's answer)
        let cases = [
            ("*.raw", "img/00.raw", true),
            ("img/*.raw", "img/a/b.raw", true),
            ("*", "", true),
            ("?", "", false),
            ("a?c", "abc", true),
            ("a?c", "a/c", true),
            ("[ab]*", "bx", true),
            ("[!ab]*", "bx", false),
            ("[!ab]*", "cx", true),
            ("[]]", "]", true),
            ("[!]]", "]", false),
            ("[a-c]", "b", true),
            ("[c-a]", "b", false),
            ("[", "[", true),
            ("a[", "a[", true),
            ("**.npy", "x/y.npy", true),
            ("{a,b}", "{a,b}", true),
            ("{a,b}", "a", false),
            ("*.RAW", "x.raw", false),
            ("*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaac", false),
            ("é*", "éclair", true),
            ("[-a]", "-", true),
            ("[a-]", "-", true),
        ];
        for (p, n, want) in cases {
            assert_eq!(fnmatch(p, n), want, "{p:?} vs {n:?}");
        }
    }
}
