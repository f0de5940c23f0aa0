//! Labels of images from a JSON member (`{"labels": {name: label}}` or
//! `{"labels": [[name, label], ...]}`, with an optional `"classes"` list, as `packread
//! convert` writes it) and Python-style quoting for the messages about them.

use serde_json::Value;

use crate::error::{Error, ErrorKind, Result};

const FORMS: &str = "{'labels': {name: label}} or {'labels': [[name, label], ...]}";

/// A string as Python's `repr` shows it: in single quotes (double quotes when it holds a
/// single quote and no double one), backslashes, quotes and control characters escaped.
pub fn py_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Marks the tokens Python's `json` accepts and JSON does not (`NaN`, `Infinity`,
/// `-Infinity`) outside strings: they become strings holding `\u0000` and the token, so that
/// the label check refuses them by name rather than the parser refusing the document.
fn mark_python_tokens(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let (mut i, mut in_string, mut escaped) = (0, false, false);
    while i < raw.len() {
        let b = raw[i];
        if in_string {
            out.push(b);
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            i += 1;
            continue;
        }
        if b == b'"' {
            in_string = true;
            out.push(b);
            i += 1;
            continue;
        }
        let token = [&b"-Infinity"[..], b"Infinity", b"NaN"]
            .into_iter()
            .find(|t| raw[i..].starts_with(t));
        match token {
            Some(t) => {
                out.extend_from_slice(b"\"\\u0000");
                out.extend_from_slice(t);
                out.push(b'"');
                i += t.len();
            }
            None => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// A JSON value as a message shows it: its text, cut short.
fn shown(value: &Value) -> String {
    let text = match value {
        Value::String(s) if s.starts_with('\0') => s[1..].to_string(),
        v => v.to_string(),
    };
    if text.chars().count() <= 40 {
        text
    } else {
        format!("{}...", text.chars().take(37).collect::<String>())
    }
}

fn malformed(where_: &str, reason: Option<&str>) -> Error {
    let reason = reason.map(|r| format!(" ({r})")).unwrap_or_default();
    Error::new(
        ErrorKind::InvalidArgument,
        where_,
        format!("labels must be JSON of the form {FORMS}{reason}"),
    )
}

/// The labels of `names` from the JSON document `raw` (read from `where_`: archive and
/// member), and its `"classes"` list when it has one. A name without a label is a key error
/// naming it; a label must be a JSON integer in int64's range (`"3"`, `1.5`, `true`, `null`,
/// `NaN` and lists are refused, never coerced).
pub(super) fn from_json(
    raw: &[u8],
    where_: &str,
    names: &[String],
) -> Result<(Vec<i64>, Option<Vec<String>>)> {
    let doc: Value = serde_json::from_slice(&mark_python_tokens(raw)).map_err(|e| {
        let text = e.to_string();
        if text.contains("recursion limit") {
            malformed(where_, Some("nested too deeply"))
        } else {
            malformed(where_, Some(&text))
        }
    })?;
    let table: serde_json::Map<String, Value> = match doc.get("labels") {
        Some(Value::Object(map)) => map.clone(),
        Some(Value::Array(pairs)) => {
            let mut map = serde_json::Map::new();
            for pair in pairs {
                match pair.as_array().map(Vec::as_slice) {
                    Some([Value::String(name), label]) => {
                        map.insert(name.clone(), label.clone());
                    }
                    _ => return Err(malformed(where_, None)),
                }
            }
            map
        }
        _ => return Err(malformed(where_, None)),
    };
    let mut labels = Vec::with_capacity(names.len());
    for name in names {
        let label = table.get(name).ok_or_else(|| {
            Error::new(
                ErrorKind::Key,
                where_,
                format!("no label for {}", py_repr(name)),
            )
        })?;
        let value = match label {
            Value::Number(n) => n.as_i64(),
            _ => None,
        };
        // A number written with a fraction or exponent (`3.0`, `1e2`) is not an integer.
        let integral = label
            .as_number()
            .is_some_and(|n| !n.to_string().contains(['.', 'e', 'E']));
        match value {
            Some(v) if integral => labels.push(v),
            _ => {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    where_,
                    format!(
                        "the label of {} is {}, not an integer in int64's range",
                        py_repr(name),
                        shown(label)
                    ),
                ))
            }
        }
    }
    let classes = match doc.get("classes") {
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => Some(
            items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
        ),
        _ => None,
    };
    Ok((labels, classes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn both_forms_and_classes() {
        let (l, c) = from_json(
            br#"{"labels": {"a": 1, "b": -9223372036854775808}, "classes": ["x", "y"]}"#,
            "w",
            &names(&["b", "a"]),
        )
        .unwrap();
        assert_eq!(l, [i64::MIN, 1]);
        assert_eq!(c.unwrap(), ["x", "y"]);
        let (l, c) = from_json(br#"{"labels": [["a", 3]]}"#, "w", &names(&["a"])).unwrap();
        assert_eq!((l, c), (vec![3], None));
    }

    #[test]
    fn labels_that_are_not_int64_integers_are_refused_by_name() {
        for bad in [
            r#""3""#,
            "1.5",
            "3.0",
            "1e2",
            "true",
            "null",
            "[1]",
            "NaN",
            "-Infinity",
            "9223372036854775808",
            "-9223372036854775809",
        ] {
            let doc = format!(r#"{{"labels": {{"a": {bad}}}}}"#);
            let e = from_json(doc.as_bytes(), "w", &names(&["a"])).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{bad}");
            assert!(e.to_string().contains("'a'"), "{bad}: {e}");
            // serde_json writes an exponent with its sign (`1e+2`).
            let want = if bad == "1e2" {
                "1e+2"
            } else {
                bad.trim_matches('"')
            };
            assert!(e.to_string().contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn malformed_documents_say_the_forms() {
        for doc in [
            &b"not json"[..],
            b"{}",
            b"{\"labels\": 5}",
            b"{\"labels\": [[1]]}",
        ] {
            let e = from_json(doc, "w", &names(&["a"])).unwrap_err();
            assert!(e.to_string().contains("labels must be JSON"), "{e}");
        }
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let e = from_json(deep.as_bytes(), "w", &names(&["a"])).unwrap_err();
        assert!(e.to_string().contains("nested too deeply"), "{e}");
        let e = from_json(br#"{"labels": {}}"#, "w", &names(&["a"])).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Key);
    }

    #[test]
    fn repr_quotes_as_python() {
        assert_eq!(py_repr("a.jpg"), "'a.jpg'");
        assert_eq!(py_repr("it's"), "\"it's\"");
        assert_eq!(py_repr("a\\b\n"), "'a\\\\b\\n'");
    }
}
