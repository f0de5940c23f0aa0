//! The `ImageFolder` layout, `root/<class>/<file>`: as a folder on disk ([`folder`]) or packed
//! in an archive ([`in_archive`]). Samples, classes and labels come out exactly as
//! `torchvision.datasets.ImageFolder` gives them: classes are the sorted class folder names,
//! files are walked in sorted order (links followed) and kept by extension.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Result};

/// The file names `torchvision.datasets.ImageFolder` takes for images (compared in lower
/// case): the same, so that a tree gives the same samples and labels. packread decodes JPEG,
/// PNG and WebP; a file of another format among them is a `DecodeError` (or skipped).
pub const IMG_EXTENSIONS: [&str; 9] = [
    ".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp",
];

/// Whether a file name ends in an image extension (any case).
pub fn is_image(name: &[u8]) -> bool {
    let lower = name.to_ascii_lowercase();
    IMG_EXTENSIONS.iter().any(|e| lower.ends_with(e.as_bytes()))
}

/// The key Python sorts a name by: its characters as `os.fsdecode` makes them (a byte that is
/// not part of valid UTF-8 becomes the lone surrogate `U+DC80 + byte`), so that names sort as
/// `sorted()` sorts them.
pub fn sort_key(name: &OsStr) -> Vec<u32> {
    let mut key = Vec::with_capacity(name.len());
    for chunk in name.as_bytes().utf8_chunks() {
        key.extend(chunk.valid().chars().map(u32::from));
        key.extend(chunk.invalid().iter().map(|&b| 0xDC00 + u32::from(b)));
    }
    key
}

/// An `ImageFolder` tree found on disk: each image's path and label, and the classes.
pub struct Tree {
    /// The images, in sample order.
    pub paths: Vec<PathBuf>,
    /// The class folders' names, sorted: label `k` is `classes[k]`.
    pub classes: Vec<OsString>,
    /// Each image's label.
    pub labels: Vec<i64>,
}

/// Whether `path` is a directory, links followed (as `DirEntry.is_dir()`).
fn is_dir(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_dir())
}

/// The samples of the tree at `root`. A folder that cannot be listed below a class is left
/// out, as `os.walk` leaves it; a link back to a folder already walked is not walked again
/// (`os.walk` would follow it until the path grew too long).
pub fn folder(root: &Path) -> Result<Tree> {
    let shown = crate::source::shown(root);
    let entries = std::fs::read_dir(root).map_err(|e| Error::io(&shown, e))?;
    let mut classes: Vec<PathBuf> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(&shown, e))?;
        if is_dir(&entry.path()) {
            classes.push(entry.path());
        }
    }
    classes.sort_by_key(|p| sort_key(p.file_name().unwrap_or_default()));
    if classes.is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            shown,
            "no class folders (the ImageFolder layout is root/<class>/<file>)",
        ));
    }
    let mut paths = Vec::new();
    let mut labels = Vec::new();
    let mut empty = Vec::new();
    let names: Vec<OsString> = classes
        .iter()
        .map(|c| c.file_name().unwrap_or_default().to_os_string())
        .collect();
    for (k, class) in classes.iter().enumerate() {
        let before = paths.len();
        for file in walk(class) {
            paths.push(file);
            labels.push(k as i64);
        }
        if paths.len() == before {
            empty.push(crate::source::shown(Path::new(&names[k])));
        }
    }
    if !empty.is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            shown,
            format!(
                "no image files in the class folders {empty:?} (extensions: {:?})",
                IMG_EXTENSIONS
            ),
        ));
    }
    Ok(Tree {
        paths,
        classes: names,
        labels,
    })
}

/// The image files below `top`, as `sorted(os.walk(top, followlinks=True))` lists them:
/// folders in path order, each folder's files in name order.
fn walk(top: &Path) -> Vec<PathBuf> {
    let mut folders: Vec<(Vec<u32>, PathBuf, Vec<PathBuf>)> = Vec::new();
    let mut seen: HashSet<(u64, u64)> = HashSet::new();
    let mut todo = vec![top.to_path_buf()];
    while let Some(dir) = todo.pop() {
        let Ok(meta) = std::fs::metadata(&dir) else {
            continue;
        };
        if !seen.insert((meta.dev(), meta.ino())) {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if is_dir(&path) {
                todo.push(path);
            } else if is_image(entry.file_name().as_bytes()) {
                files.push(path);
            }
        }
        files.sort_by_key(|p| sort_key(p.file_name().unwrap_or_default()));
        folders.push((sort_key(dir.as_os_str()), dir, files));
    }
    folders.sort_by(|a, b| a.0.cmp(&b.0));
    folders
        .into_iter()
        .flat_map(|(_, _, files)| files)
        .collect()
}

/// Python's `posixpath.dirname`.
fn dirname(p: &str) -> &str {
    let i = p.rfind('/').map_or(0, |i| i + 1);
    let head = &p[..i];
    if !head.is_empty() && head.bytes().any(|b| b != b'/') {
        head.trim_end_matches('/')
    } else {
        head
    }
}

/// Python's `posixpath.basename`.
fn basename(p: &str) -> &str {
    &p[p.rfind('/').map_or(0, |i| i + 1)..]
}

/// Python's `posixpath.commonpath` (`None` where it raises: absolute and relative mixed).
fn commonpath(paths: &[&str]) -> Option<String> {
    let absolute = paths.first()?.starts_with('/');
    if paths.iter().any(|p| p.starts_with('/') != absolute) {
        return None;
    }
    let split: Vec<Vec<&str>> = paths
        .iter()
        .map(|p| {
            p.split('/')
                .filter(|c| !c.is_empty() && *c != ".")
                .collect()
        })
        .collect();
    let (lo, hi) = (split.iter().min()?, split.iter().max()?);
    let n = lo.iter().zip(hi).take_while(|(a, b)| a == b).count();
    let prefix = if absolute { "/" } else { "" };
    Some(format!("{prefix}{}", lo[..n].join("/")))
}

/// The `ImageFolder` tree inside an archive, given its image members' names: below the
/// members' common folder, the first folder of each image is its class. Returns the names in
/// sample order, the classes and the labels; `None` when some image has no class folder.
pub fn in_archive(names: &[String]) -> Option<(Vec<String>, Vec<String>, Vec<i64>)> {
    let dirs: Vec<&str> = names.iter().map(|n| dirname(n)).collect();
    let common = if !dirs.is_empty() && dirs.iter().all(|d| !d.is_empty()) {
        commonpath(&dirs)?
    } else {
        String::new()
    };
    let mut parts = Vec::with_capacity(names.len());
    for n in names {
        let rest = if common.is_empty() {
            n.as_str()
        } else {
            n.get(common.len() + 1..).unwrap_or("")
        };
        let (class, _) = rest.split_once('/')?;
        parts.push((class, dirname(rest), basename(rest), n.as_str()));
    }
    parts.sort();
    let mut classes: Vec<String> = parts.iter().map(|p| p.0.to_string()).collect();
    classes.dedup();
    classes.sort();
    classes.dedup();
    let labels = parts
        .iter()
        .map(|p| {
            classes
                .binary_search_by(|c| c.as_str().cmp(p.0))
                .unwrap_or(0) as i64
        })
        .collect();
    let ordered = parts.iter().map(|p| p.3.to_string()).collect();
    Some((ordered, classes, labels))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_helpers_match_posixpath() {
        assert_eq!(dirname("a/b/c.jpg"), "a/b");
        assert_eq!(dirname("c.jpg"), "");
        assert_eq!(dirname("/c.jpg"), "/");
        assert_eq!(dirname("a//c"), "a");
        assert_eq!(basename("a/b/c.jpg"), "c.jpg");
        assert_eq!(commonpath(&["a/b", "a/c"]).unwrap(), "a");
        assert_eq!(commonpath(&["a/b", "a/b/c"]).unwrap(), "a/b");
        assert_eq!(commonpath(&["x", "y"]).unwrap(), "");
        assert!(commonpath(&["/x", "y"]).is_none());
    }

    #[test]
    fn an_archive_tree_labels_by_the_first_folder_below_the_common_one() {
        let names: Vec<String> = ["root/dog/b.jpg", "root/cat/x/a.jpg", "root/cat/z.jpg"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let (ordered, classes, labels) = in_archive(&names).unwrap();
        assert_eq!(classes, ["cat", "dog"]);
        // Sorted by (class, folder below it, name).
        assert_eq!(
            ordered,
            ["root/cat/z.jpg", "root/cat/x/a.jpg", "root/dog/b.jpg"]
        );
        assert_eq!(labels, [0, 0, 1]);
        assert!(in_archive(&["a.jpg".to_string()]).is_none());
    }

    #[test]
    fn names_sort_as_python_sorts_them() {
        // U+00E9 sorts before a lone surrogate (a byte that is not UTF-8), which sorts before
        // U+E000.
        let e = sort_key(OsStr::new("\u{e9}"));
        let bad = sort_key(OsStr::from_bytes(b"\xff"));
        let private = sort_key(OsStr::new("\u{e000}"));
        assert!(e < bad && bad < private);
    }
}
