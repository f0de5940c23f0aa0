//! Element types, described the way numpy describes them in an NPY header (`descr`): a type
//! string such as `'<f4'` or `'|S10'`, or a list of `(name, descr[, shape])` fields. The core
//! only needs the item size; the binding turns the same description into a `numpy.dtype`.

pub mod literal;

use crate::dtype::literal::Literal;

/// A numpy element type, checked: its `descr` and the item size computed from it. Made only
/// by [`DType::from_descr`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DType {
    descr: Literal,
    itemsize: usize,
}

impl DType {
    /// Validates a numpy `descr` and computes its item size. Object types are refused: reading
    /// them would mean unpickling.
    pub fn from_descr(descr: Literal) -> Result<DType, DescrError> {
        let itemsize = descr_itemsize(&descr, 0)?;
        Ok(DType { descr, itemsize })
    }

    /// The `descr` as the header wrote it: a type string or a list of fields.
    pub fn descr(&self) -> &Literal {
        &self.descr
    }

    /// Bytes of one element (numpy's `itemsize`; 0 for `np.dtype([])`).
    pub fn itemsize(&self) -> usize {
        self.itemsize
    }
}

/// Why a descr was refused: malformed, or well-formed but holding Python objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DescrError {
    /// Not a dtype numpy would build; the message says what is wrong.
    Malformed(String),
    /// An object (`'O'`) type, on its own or inside a field.
    Object,
}

fn malformed(msg: impl Into<String>) -> DescrError {
    DescrError::Malformed(msg.into())
}

fn descr_itemsize(descr: &Literal, depth: usize) -> Result<usize, DescrError> {
    if depth > 16 {
        return Err(malformed("dtype nested too deeply"));
    }
    match descr {
        Literal::Str(s) => typestr_itemsize(s),
        Literal::List(fields) => {
            // An empty list is a valid (zero-size) structured dtype: `np.dtype([])`.
            let mut total = 0usize;
            for field in fields {
                let size = field_itemsize(field, depth)?;
                total = total
                    .checked_add(size)
                    .ok_or_else(|| malformed("structured dtype size overflows"))?;
            }
            Ok(total)
        }
        other => Err(malformed(format!(
            "descr must be a type string or a list of fields, not {}",
            other.type_name()
        ))),
    }
}

fn field_itemsize(field: &Literal, depth: usize) -> Result<usize, DescrError> {
    let Literal::Tuple(parts) = field else {
        return Err(malformed(format!("field {field} is not a tuple")));
    };
    if !(2..=3).contains(&parts.len()) {
        return Err(malformed(format!(
            "field {field} must be (name, type) or (name, type, shape)"
        )));
    }
    match &parts[0] {
        Literal::Str(_) => {}
        // (title, name)
        Literal::Tuple(t) if t.len() == 2 && t.iter().all(|x| x.as_str().is_some()) => {}
        other => return Err(malformed(format!("field name {other} is not a string"))),
    }
    let base = descr_itemsize(&parts[1], depth + 1)?;
    let count = match parts.get(2) {
        None => 1usize,
        Some(Literal::Int(n)) => dim(*n)?,
        Some(Literal::Tuple(dims)) => dims.iter().try_fold(1usize, |acc, d| match d {
            Literal::Int(n) => acc
                .checked_mul(dim(*n)?)
                .ok_or_else(|| malformed("field shape overflows")),
            other => Err(malformed(format!(
                "field shape entry {other} is not an int"
            ))),
        })?,
        Some(other) => return Err(malformed(format!("field shape {other} is not a tuple"))),
    };
    base.checked_mul(count)
        .ok_or_else(|| malformed("field size overflows"))
}

fn dim(n: i128) -> Result<usize, DescrError> {
    usize::try_from(n).map_err(|_| malformed(format!("invalid field dimension {n}")))
}

/// Item size of numpy's one-letter type codes (`'?'`, `'d'`, ...), which `numpy.dtype` (and so
/// `numpy.load`) accepts in a header's `descr` as well as full type strings.
fn char_code_itemsize(code: &str) -> Option<usize> {
    Some(match code {
        "?" | "b" | "B" => 1,
        "h" | "H" | "e" => 2,
        "i" | "I" | "f" => 4,
        "l" | "L" | "q" | "Q" | "d" | "F" | "p" | "P" => 8,
        "D" => 16,
        "g" => 16,
        "G" => 32,
        _ => return None,
    })
}

/// Item size of a numpy type string (`dtype.str`): byte order, kind, size, optional unit.
fn typestr_itemsize(s: &str) -> Result<usize, DescrError> {
    let body = s.strip_prefix(['<', '>', '|', '=']).unwrap_or(s);
    if let Some(n) = char_code_itemsize(body) {
        return Ok(n);
    }
    let mut chars = body.chars();
    let kind = chars.next().ok_or_else(|| malformed("empty type string"))?;
    let rest = chars.as_str();
    if kind == 'O' {
        return Err(DescrError::Object);
    }
    let (digits, unit) = match rest.find('[') {
        Some(i) if matches!(kind, 'M' | 'm') && rest.ends_with(']') => (&rest[..i], &rest[i..]),
        _ => (rest, ""),
    };
    let n: usize = if digits.is_empty() && matches!(kind, 'S' | 'a' | 'U' | 'V') {
        0 // `'S'`: numpy's zero-size flexible type
    } else {
        digits
            .parse()
            .map_err(|_| malformed(format!("unsupported type string {s:?}")))?
    };
    let ok = match kind {
        'b' => n == 1,
        'i' | 'u' => matches!(n, 1 | 2 | 4 | 8),
        'f' => matches!(n, 2 | 4 | 8 | 10 | 12 | 16),
        'c' => matches!(n, 8 | 16 | 20 | 24 | 32),
        'M' | 'm' => n == 8 && (unit.is_empty() || unit.len() > 2),
        'S' | 'a' | 'V' => true,
        'U' => true,
        _ => false,
    };
    if !ok {
        return Err(malformed(format!("unsupported type string {s:?}")));
    }
    if kind == 'U' {
        n.checked_mul(4)
            .ok_or_else(|| malformed(format!("type string {s:?} too large")))
    } else {
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::literal::parse;

    fn size(descr: &str) -> Result<usize, DescrError> {
        DType::from_descr(parse(descr).unwrap()).map(|d| d.itemsize())
    }

    #[test]
    fn scalar_sizes() {
        assert_eq!(size("'<f4'"), Ok(4));
        assert_eq!(size("'|b1'"), Ok(1));
        assert_eq!(size("'>c16'"), Ok(16));
        assert_eq!(size("'<U10'"), Ok(40));
        assert_eq!(size("'|S0'"), Ok(0));
        assert_eq!(size("'<M8[ns]'"), Ok(8));
        assert_eq!(size("'|V12'"), Ok(12));
        // One-letter codes numpy.dtype accepts in a header ('?' is bool).
        assert_eq!(size("'?'"), Ok(1));
        assert_eq!(size("'|?'"), Ok(1));
        assert_eq!(size("'<d'"), Ok(8));
        assert_eq!(size("'S'"), Ok(0));
        assert_eq!(size("'<U'"), Ok(0));
    }

    #[test]
    fn structured_sizes() {
        assert_eq!(size("[('a', '<i4'), ('b', '<f8', (2, 3))]"), Ok(4 + 48));
        assert_eq!(size("[(('t', 'a'), '<i2'), ('', '|V2')]"), Ok(4));
        assert_eq!(size("[('a', [('x', '<u1')], 3)]"), Ok(3));
    }

    #[test]
    fn refusals() {
        assert_eq!(size("'|O'"), Err(DescrError::Object));
        assert_eq!(size("[('a', '|O')]"), Err(DescrError::Object));
        assert!(matches!(size("'<i3'"), Err(DescrError::Malformed(_))));
        assert!(matches!(size("'float32'"), Err(DescrError::Malformed(_))));
        assert_eq!(size("[]"), Ok(0));
        assert!(matches!(size("5"), Err(DescrError::Malformed(_))));
        assert!(matches!(
            size("[('a', '<i4', (-1,))]"),
            Err(DescrError::Malformed(_))
        ));
    }
}
