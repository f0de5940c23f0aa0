//! From the indices a caller asks for to the rows a format reads.

use crate::error::{Error, ErrorKind, Result};

/// Resolves Python-style indices (negative counts from the end) against `len` samples, keeping
/// order and duplicates; an index out of range is an error naming `location` (the reader's
/// file, see [`location_of`]).
pub fn resolve_indices(idx: &[i64], len: usize, location: &str) -> Result<Vec<usize>> {
    let n = i64::try_from(len).unwrap_or(i64::MAX);
    idx.iter()
        .map(|&i| {
            let j = if i < 0 { i.checked_add(n) } else { Some(i) };
            match j {
                Some(j) if (0..n).contains(&j) => Ok(j as usize),
                _ => Err(Error::new(
                    ErrorKind::Index,
                    location,
                    format!("index {i} is out of range for {len} samples"),
                )),
            }
        })
        .collect()
}

/// How a reader of many files is named in messages: its first file, and how many more.
pub fn location_of(paths: &[std::path::PathBuf]) -> String {
    match paths {
        [] => String::new(),
        [one] => one.display().to_string(),
        [first, rest @ ..] => format!("{} (and {} more files)", first.display(), rest.len()),
    }
}

/// Checks that an output buffer holds exactly `rows` samples of `row_bytes` each.
pub fn check_out_len(got: usize, rows: usize, row_bytes: usize) -> Result<()> {
    let want = rows.checked_mul(row_bytes);
    if want != Some(got) {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            "",
            format!(
                "output buffer is {got} bytes, {rows} samples of {row_bytes} bytes need {want:?}"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negatives_duplicates_and_bounds() {
        assert_eq!(
            resolve_indices(&[0, -1, 2, 2], 3, "f").unwrap(),
            vec![0, 2, 2, 2]
        );
        assert_eq!(resolve_indices(&[-3], 3, "f").unwrap(), vec![0]);
        for bad in [3, -4, i64::MIN, i64::MAX] {
            let e = resolve_indices(&[bad], 3, "f.npy").unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Index);
            assert!(e.message().contains(&bad.to_string()));
            assert_eq!(e.location(), "f.npy");
        }
        assert!(resolve_indices(&[], 0, "f").unwrap().is_empty());
    }
}
