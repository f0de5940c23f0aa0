//! Which videos a source of frame folders holds, their frames in order, names and labels: a
//! folder tree on disk (`root/<video>/<frames>` or `root/<class>/<video>/<frames>`), the same
//! tree packed in a ZIP archive (its directory is the index: no file is opened per frame), or
//! the videos an mmaction list file names (`path num_frames [label]` a line).
//!
//! Frames are the image files of a video's folder in natural order: runs of digits compare by
//! their value, so `img_2.jpg` comes before `img_10.jpg` (ties, such as `1` and `01`, by their
//! length, then as Python's `sorted`). Other files are left out. Frames numbered unevenly
//! (`img_4`, then `img_6`, where the rest step by one) are a missing frame, refused when the
//! reader opens.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::clip::{ClipIndex, ClipSpec, Video};
use super::open::{ImageOptions, Labels};
use super::tree::{is_image, sort_key};
use super::{ImageBytes, ImageIndex};
use crate::error::{Error, ErrorKind, Result};
use crate::formats::zip::{Members, ZipIndex};
use crate::source::{FileList, Source, StampedPath};

/// Largest list file read.
const MAX_LIST_BYTES: u64 = 256 << 20;

/// How a source's clips are found and cut.
#[derive(Debug, Clone)]
pub struct ClipOptions {
    /// How each frame is decoded, which members are frames, where labels come from.
    pub images: ImageOptions,
    /// How clips are cut.
    pub clip: ClipSpec,
    /// An mmaction list file naming the videos (in its order), else every video folder.
    pub list: Option<PathBuf>,
}

/// A source's clips: the index, each sample's name (its video's) and label.
pub struct ClipSet {
    /// The clips as samples.
    pub index: Arc<ClipIndex>,
    /// Each sample's name: its video's.
    pub names: Vec<OsString>,
    /// Each sample's label, where the source has labels.
    pub labels: Option<Vec<i64>>,
    /// The class names by label, where class folders name them.
    pub classes: Option<Vec<OsString>>,
    /// Where the labels came from: `"folders"` or the list file.
    pub label_source: Option<String>,
}

/// A name's natural sort key ([`natural_key`]).
pub type NaturalKey = Vec<Vec<u32>>;

/// A video folder's frame members in an archive: each with its name's key.
type FrameMembers = Vec<(NaturalKey, usize)>;

/// One part of a name's natural sort key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Part {
    /// A run of digits: its length without leading zeros, those digits, its whole length.
    Number(usize, Vec<u8>, usize),
    /// Anything else, as Python sorts it.
    Text(Vec<u32>),
}

/// The key frames are ordered by (see the module).
pub fn natural_key(name: &std::ffi::OsStr) -> NaturalKey {
    // Flattened into comparable vectors: a number as [0, len, digits...], text as [1, chars].
    parts(name.as_bytes())
        .into_iter()
        .map(|p| match p {
            Part::Number(n, digits, whole) => {
                let mut v = vec![0, n as u32];
                v.extend(digits.iter().map(|&d| u32::from(d)));
                v.push(whole as u32);
                v
            }
            Part::Text(t) => {
                let mut v = vec![1];
                v.extend(t);
                v
            }
        })
        .collect()
}

fn parts(name: &[u8]) -> Vec<Part> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < name.len() {
        let digit = name[i].is_ascii_digit();
        let j = i + name[i..]
            .iter()
            .position(|b| b.is_ascii_digit() != digit)
            .unwrap_or(name.len() - i);
        let run = &name[i..j];
        if digit {
            let trimmed: Vec<u8> = run.iter().skip_while(|&&b| b == b'0').copied().collect();
            out.push(Part::Number(trimmed.len(), trimmed, run.len()));
        } else {
            out.push(Part::Text(sort_key(std::ffi::OsStr::from_bytes(run))));
        }
        i = j;
    }
    out
}

/// Refuses frames numbered unevenly (a frame missing): where every frame's name is one prefix,
/// a number and one suffix, the numbers must step evenly.
fn check_numbering(video: &str, names: &[&[u8]]) -> Result<()> {
    if names.len() < 3 {
        return Ok(());
    }
    let mut shape: Option<(&[u8], &[u8])> = None;
    let mut numbers = Vec::with_capacity(names.len());
    for name in names {
        let Some(end) = name.iter().rposition(u8::is_ascii_digit) else {
            return Ok(());
        };
        let start = name[..end]
            .iter()
            .rposition(|b| !b.is_ascii_digit())
            .map_or(0, |i| i + 1);
        let (prefix, suffix) = (&name[..start], &name[end + 1..]);
        match shape {
            None => shape = Some((prefix, suffix)),
            Some(s) if s != (prefix, suffix) => return Ok(()),
            Some(_) => {}
        }
        let Ok(n) = std::str::from_utf8(&name[start..=end])
            .unwrap_or("x")
            .parse::<u64>()
        else {
            return Ok(());
        };
        numbers.push(n);
    }
    let steps: Vec<u64> = numbers
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]))
        .collect();
    let least = steps.iter().copied().min().unwrap_or(1);
    if let Some(k) = steps.iter().position(|&s| s != least || s == 0) {
        return Err(Error::new(
            ErrorKind::Inconsistent,
            video,
            format!(
                "frames are not numbered evenly: {} is followed by {} (a frame missing, or two \
                 of one number); every other frame steps by {least}",
                String::from_utf8_lossy(names[k]),
                String::from_utf8_lossy(names[k + 1])
            ),
        ));
    }
    Ok(())
}

/// A video found: its name, its frames (paths or member positions) and class.
struct Found<T> {
    name: String,
    frames: Vec<T>,
    label: Option<i64>,
}

/// One line of a list file: the video's folder, its frame count, its label.
struct Listed {
    path: String,
    frames: usize,
    label: Option<i64>,
}

fn read_list(list: &Path) -> Result<Vec<Listed>> {
    let shown = crate::source::shown(list);
    let meta = std::fs::metadata(list).map_err(|e| Error::io(&shown, e))?;
    if meta.len() > MAX_LIST_BYTES {
        return Err(Error::new(
            ErrorKind::LimitExceeded,
            shown,
            format!("a list file of {} bytes, over {MAX_LIST_BYTES}", meta.len()),
        ));
    }
    let text = std::fs::read(list).map_err(|e| Error::io(&shown, e))?;
    let text = String::from_utf8(text).map_err(|_| {
        Error::new(
            ErrorKind::InvalidArgument,
            shown.clone(),
            "the list file is not UTF-8 text",
        )
    })?;
    let mut out = Vec::new();
    for (k, line) in text.lines().enumerate() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.is_empty() {
            continue;
        }
        let bad = || {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("{shown}:{}", k + 1),
                format!("expected 'path num_frames [label]', got {line:?}"),
            )
        };
        if !(2..=3).contains(&fields.len()) {
            return Err(bad());
        }
        let frames = fields[1].parse::<usize>().map_err(|_| bad())?;
        let label = match fields.get(2) {
            Some(l) => Some(l.parse::<i64>().map_err(|_| bad())?),
            None => None,
        };
        out.push(Listed {
            path: fields[0].to_string(),
            frames,
            label,
        });
    }
    if out.is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            shown,
            "the list file names no videos",
        ));
    }
    Ok(out)
}

/// Checks a listed video's frame count against what its folder holds.
fn check_listed(listed: &Listed, found: usize, at: &str) -> Result<()> {
    if listed.frames != found {
        return Err(Error::new(
            ErrorKind::Inconsistent,
            at,
            format!(
                "the list file says {} frames, the folder holds {found} image files",
                listed.frames
            ),
        ));
    }
    Ok(())
}

/// Labels of the listed videos: every line has one, or none has.
fn listed_labels(list: &[Listed], file: &Path) -> Result<Option<Vec<i64>>> {
    let with = list.iter().filter(|l| l.label.is_some()).count();
    if with == 0 {
        return Ok(None);
    }
    if with != list.len() {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            crate::source::shown(file),
            "some lines of the list file have a label and some do not",
        ));
    }
    Ok(Some(list.iter().map(|l| l.label.unwrap_or(0)).collect()))
}

/// The image files of a video folder, in natural order.
fn frames_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let shown = crate::source::shown(dir);
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(&shown, e))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(&shown, e))?;
        let name = entry.file_name();
        if is_image(name.as_bytes()) && !std::fs::metadata(entry.path()).is_ok_and(|m| m.is_dir()) {
            files.push((natural_key(&name), entry.path()));
        }
    }
    files.sort();
    let names: Vec<&[u8]> = files
        .iter()
        .map(|(_, p)| p.file_name().unwrap_or_default().as_bytes())
        .collect();
    check_numbering(&shown, &names)?;
    Ok(files.into_iter().map(|(_, p)| p).collect())
}

fn subfolders(dir: &Path) -> Result<Vec<PathBuf>> {
    let shown = crate::source::shown(dir);
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(&shown, e))? {
        let entry = entry.map_err(|e| Error::io(&shown, e))?;
        if std::fs::metadata(entry.path()).is_ok_and(|m| m.is_dir()) {
            out.push(entry.path());
        }
    }
    out.sort_by_key(|p| sort_key(p.file_name().unwrap_or_default()));
    Ok(out)
}

fn holds_images(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| is_image(e.file_name().as_bytes()) && e.file_type().is_ok_and(|t| !t.is_dir()))
    })
}

/// The videos of a frame tree on disk.
pub fn from_folder(root: &Path, options: &ClipOptions) -> Result<ClipSet> {
    let at = crate::source::shown(root);
    if options.images.members != Members::All {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            at,
            "members= selects ZIP members; a folder has none",
        ));
    }
    let mut classes = None;
    let mut label_source = None;
    let mut found: Vec<Found<PathBuf>> = Vec::new();
    if let Some(list) = &options.list {
        let listed = read_list(list)?;
        let labels = listed_labels(&listed, list)?;
        for (k, l) in listed.iter().enumerate() {
            let dir = root.join(&l.path);
            let shown = crate::source::shown(&dir);
            if !dir.is_dir() {
                return Err(Error::io(
                    format!("{shown} (line {} of {})", k + 1, crate::source::shown(list)),
                    std::io::Error::new(std::io::ErrorKind::NotFound, "no such video folder"),
                ));
            }
            let frames = frames_in(&dir)?;
            check_listed(l, frames.len(), &shown)?;
            found.push(Found {
                name: shown,
                frames,
                label: labels.as_ref().map(|v| v[k]),
            });
        }
        if labels.is_some() {
            label_source = Some(crate::source::shown(list));
        }
    } else {
        let top = subfolders(root)?;
        if top.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                at,
                "no video folders (the layouts are root/<video>/<frames> and \
                 root/<class>/<video>/<frames>)",
            ));
        }
        let flat = top.iter().any(|d| holds_images(d))
            || top
                .iter()
                .all(|d| subfolders(d).map_or(true, |s| s.is_empty()));
        if flat {
            for dir in top {
                found.push(Found {
                    name: crate::source::shown(&dir),
                    frames: frames_in(&dir)?,
                    label: None,
                });
            }
        } else {
            let mut names = Vec::new();
            for (c, class) in top.iter().enumerate() {
                let videos = subfolders(class)?;
                if videos.is_empty() {
                    return Err(Error::new(
                        ErrorKind::InvalidArgument,
                        crate::source::shown(class),
                        "a class folder without video folders",
                    ));
                }
                for dir in videos {
                    found.push(Found {
                        name: crate::source::shown(&dir),
                        frames: frames_in(&dir)?,
                        label: Some(c as i64),
                    });
                }
                names.push(class.file_name().unwrap_or_default().to_os_string());
            }
            classes = Some(names);
            label_source = Some("folders".to_string());
        }
    }
    let mut sources: Vec<Arc<dyn Source>> = Vec::new();
    let mut frame_names = Vec::new();
    for v in &found {
        for p in &v.frames {
            sources.push(Arc::new(StampedPath::stamped(p.clone())?));
            frame_names.push(crate::source::shown(p));
        }
    }
    let bytes = ImageBytes::Files(FileList::new(sources));
    finish(bytes, frame_names, found, classes, label_source, options)
}

/// Python's `posixpath.dirname` of an archive member's name.
fn dirname(p: &str) -> &str {
    p.rfind('/').map_or("", |i| &p[..i])
}

/// The videos of a frame tree packed in an archive: a video is a folder holding frames; where
/// the videos' folders lie in several folders, those are classes (the first folder below the
/// folders they share).
pub fn from_zip(zip: Arc<ZipIndex>, options: &ClipOptions, shard: bool) -> Result<ClipSet> {
    let at = zip.location().to_string();
    let chosen = zip.select(&options.images.members, |n| is_image(n.as_bytes()), true)?;
    let mut dirs: BTreeMap<String, FrameMembers> = BTreeMap::new();
    for &i in &chosen {
        let name = zip.members()[i].name();
        let dir = dirname(name);
        if dir.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                zip.member_location(i),
                "a frame outside any video folder (the layouts are <video>/<frames> and \
                 <class>/<video>/<frames>)",
            ));
        }
        let file = &name[dir.len() + 1..];
        dirs.entry(dir.to_string())
            .or_default()
            .push((natural_key(std::ffi::OsStr::new(file)), i));
    }
    for frames in dirs.values_mut() {
        frames.sort();
    }
    let parents: BTreeSet<String> = dirs.keys().map(|d| dirname(d).to_string()).collect();
    // Folders beside the videos holding no frames: videos without frames.
    let mut empty: Vec<String> = Vec::new();
    if options.list.is_none() && options.images.members == Members::All {
        for m in zip.members() {
            let name = m.name().trim_end_matches('/');
            if m.name().ends_with('/')
                && parents.contains(dirname(name))
                && !dirs.contains_key(name)
                && !dirs.keys().any(|d| d.starts_with(&format!("{name}/")))
            {
                empty.push(name.to_string());
            }
        }
    }
    for e in empty {
        dirs.entry(e).or_default();
    }
    if dirs.is_empty() && !shard {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            at,
            format!(
                "no members are frames (members={})",
                options.images.members.describe()
            ),
        ));
    }
    let check = |dir: &str, frames: &[(NaturalKey, usize)]| -> Result<Vec<usize>> {
        let names: Vec<&[u8]> = frames
            .iter()
            .map(|&(_, i)| {
                let n = zip.members()[i].name();
                &n.as_bytes()[dirname(n).len() + 1..]
            })
            .collect();
        check_numbering(&format!("{at}:{dir}"), &names)?;
        Ok(frames.iter().map(|&(_, i)| i).collect())
    };
    let mut found: Vec<Found<usize>> = Vec::new();
    let mut classes = None;
    let mut label_source = None;
    if let Some(list) = &options.list {
        let listed = read_list(list)?;
        let labels = listed_labels(&listed, list)?;
        for (k, l) in listed.iter().enumerate() {
            let dir = l.path.trim_end_matches('/');
            let Some(frames) = dirs.get(dir) else {
                return Err(Error::new(
                    ErrorKind::Key,
                    format!(
                        "{at}:{dir} (line {} of {})",
                        k + 1,
                        crate::source::shown(list)
                    ),
                    "no such video folder in the archive",
                ));
            };
            let members = check(dir, frames)?;
            check_listed(l, members.len(), &format!("{at}:{dir}"))?;
            found.push(Found {
                name: dir.to_string(),
                frames: members,
                label: labels.as_ref().map(|v| v[k]),
            });
        }
        if labels.is_some() {
            label_source = Some(crate::source::shown(list));
        }
    } else if parents.len() <= 1 {
        for (dir, frames) in &dirs {
            found.push(Found {
                name: dir.clone(),
                frames: check(dir, frames)?,
                label: None,
            });
        }
        found.sort_by_key(|f| sort_key(std::ffi::OsStr::new(&f.name)));
    } else {
        let list: Vec<&str> = parents.iter().map(String::as_str).collect();
        let common = common_folder(&list);
        let class_of = |dir: &str| -> String {
            let parent = dirname(dir);
            let rest = parent[common.len()..].trim_start_matches('/');
            rest.split('/').next().unwrap_or("").to_string()
        };
        let mut names: Vec<String> = dirs.keys().map(|d| class_of(d)).collect();
        names.sort_by_key(|n| sort_key(std::ffi::OsStr::new(n)));
        names.dedup();
        let mut ordered: Vec<(&String, &FrameMembers)> = dirs.iter().collect();
        ordered.sort_by(|a, b| {
            let (ca, cb) = (class_of(a.0), class_of(b.0));
            sort_key(std::ffi::OsStr::new(&ca))
                .cmp(&sort_key(std::ffi::OsStr::new(&cb)))
                .then_with(|| {
                    sort_key(std::ffi::OsStr::new(a.0)).cmp(&sort_key(std::ffi::OsStr::new(b.0)))
                })
        });
        for (dir, frames) in ordered {
            let class = class_of(dir);
            let label = names.iter().position(|n| *n == class).unwrap_or(0) as i64;
            found.push(Found {
                name: dir.clone(),
                frames: check(dir, frames)?,
                label: Some(label),
            });
        }
        classes = Some(names.into_iter().map(OsString::from).collect());
        label_source = Some("folders".to_string());
    }
    let members: Vec<usize> = found
        .iter()
        .flat_map(|v| v.frames.iter().copied())
        .collect();
    let frame_names = members
        .iter()
        .map(|&i| zip.members()[i].name().to_string())
        .collect();
    for v in &mut found {
        v.name = format!("{at}:{}", v.name);
    }
    let bytes = ImageBytes::Zip { zip, members };
    finish(bytes, frame_names, found, classes, label_source, options)
}

/// The longest folder path every one of `dirs` lies in (`""` for none).
fn common_folder(dirs: &[&str]) -> String {
    let split: Vec<Vec<&str>> = dirs.iter().map(|d| d.split('/').collect()).collect();
    let Some(first) = split.first() else {
        return String::new();
    };
    let n = (0..first.len())
        .take_while(|&k| split.iter().all(|s| s.get(k) == first.get(k)))
        .count();
    first[..n].join("/")
}

fn finish<T>(
    bytes: ImageBytes,
    frame_names: Vec<String>,
    found: Vec<Found<T>>,
    classes: Option<Vec<OsString>>,
    label_source: Option<String>,
    options: &ClipOptions,
) -> Result<ClipSet> {
    let images = &options.images;
    let frames = Arc::new(ImageIndex::new(
        bytes,
        frame_names,
        images.spec.clone(),
        images.seed,
        false,
        images.threads,
    )?);
    let mut videos = Vec::with_capacity(found.len());
    let mut first = 0;
    for v in &found {
        videos.push(Video {
            name: v.name.clone(),
            first,
            frames: v.frames.len(),
        });
        first += v.frames.len();
    }
    let frame_size = match images.spec.crop {
        crate::codec::image::geometry::Crop::Full => {
            let Some(v) = videos.iter().find(|v| v.frames > 0) else {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    frames.location.clone(),
                    "no video holds frames",
                ));
            };
            let data = frames.encoded(v.first)?;
            let size = crate::codec::image::geometry::upright_size(
                &data,
                &images.spec.limits,
                images.spec.exif_transpose,
            )
            .map_err(|e| {
                crate::batch::Index::locate(
                    &*frames,
                    crate::batch::Tag::new(0, v.first as u64),
                    Error::new(ErrorKind::Decode, "", e.to_string()),
                )
            })?;
            Some(size)
        }
        _ => None,
    };
    let skip = images.skip;
    let index = ClipIndex::new(frames, videos, options.clip, frame_size, images.seed, skip)?;
    let mut names = Vec::new();
    let mut sample_labels = Vec::new();
    let keep_labels = images.labels != Labels::Off;
    for (v, video) in found.iter().enumerate() {
        let samples = index.samples_in(v);
        for _ in 0..samples {
            names.push(OsString::from(&video.name));
            if let Some(l) = video.label {
                sample_labels.push(l);
            }
        }
    }
    let has_labels = keep_labels && found.iter().all(|v| v.label.is_some()) && !found.is_empty();
    Ok(ClipSet {
        index: Arc::new(index),
        names,
        labels: has_labels.then_some(sample_labels),
        classes: if keep_labels { classes } else { None },
        label_source: if has_labels { label_source } else { None },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_sort_naturally() {
        let mut names = vec![
            "img_10.jpg",
            "img_2.jpg",
            "img_1.jpg",
            "img_01.jpg",
            "a.jpg",
        ];
        names.sort_by_key(|n| natural_key(std::ffi::OsStr::new(n)));
        assert_eq!(
            names,
            [
                "a.jpg",
                "img_1.jpg",
                "img_01.jpg",
                "img_2.jpg",
                "img_10.jpg"
            ]
        );
    }

    #[test]
    fn a_missing_frame_is_found() {
        let ok: Vec<&[u8]> = vec![b"f_0001.jpg", b"f_0002.jpg", b"f_0003.jpg"];
        assert!(check_numbering("v", &ok).is_ok());
        let stepped: Vec<&[u8]> = vec![b"f_5.jpg", b"f_10.jpg", b"f_15.jpg"];
        assert!(check_numbering("v", &stepped).is_ok());
        let gap: Vec<&[u8]> = vec![b"f_1.jpg", b"f_2.jpg", b"f_4.jpg", b"f_5.jpg"];
        let e = check_numbering("v", &gap).unwrap_err();
        assert!(
            e.message().contains("f_2.jpg is followed by f_4.jpg"),
            "{e}"
        );
        let mixed: Vec<&[u8]> = vec![b"a1.jpg", b"b7.jpg", b"c9.jpg"];
        assert!(check_numbering("v", &mixed).is_ok());
    }

    #[test]
    fn the_common_folder_of_class_folders() {
        assert_eq!(common_folder(&["root/cat", "root/dog"]), "root");
        assert_eq!(common_folder(&["cat", "dog"]), "");
    }
}
