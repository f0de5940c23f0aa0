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

use super::clip::{ClipIndex, ClipSpec, Frames, Video};
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
    /// Of an HDF5 file: the datasets read (`None`: every dataset of the common length but
    /// the labels and episodes).
    pub datasets: Option<Vec<String>>,
    /// Of an HDF5 file: where the time axis's episodes end (`None`: each row is a video,
    /// its frames along the second axis).
    pub episodes: Option<Episodes>,
    /// Of an HDF5 file: frames of a dataset relative to a clip's anchor (LeRobot's
    /// `delta_timestamps` in frames), by dataset.
    pub offsets: Vec<(String, Vec<i64>)>,
    /// Of an HDF5 file: the decoded-chunk budget.
    pub cache_bytes: usize,
}

/// The episodes of a time axis: each episode's end (exclusive, increasing, the last the
/// axis's length) or each one's length (summing to the axis's length).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Episodes {
    /// An integer dataset of the file holding them.
    Dataset(String),
    /// The values themselves.
    Values(Vec<i64>),
}

/// `(first frame, frames)` of each episode of a time axis of `total` frames, from `values`:
/// episode ends when they never decrease and the last is `total`, else lengths summing to
/// `total`; anything else is refused, saying why.
pub fn episodes_of(values: &[i64], total: usize, at: &str) -> Result<Vec<(usize, usize)>> {
    let bad = |why: String| Error::new(ErrorKind::InvalidArgument, at, why);
    if values.is_empty() {
        return Err(bad("no episodes".into()));
    }
    if let Some(k) = values.iter().position(|&v| v < 0) {
        return Err(bad(format!("episodes[{k}] is {}, below 0", values[k])));
    }
    let total_i = total as i64;
    let increasing = values.windows(2).all(|w| w[0] <= w[1]);
    if increasing && values[values.len() - 1] == total_i {
        let mut out = Vec::with_capacity(values.len());
        let mut at = 0usize;
        for &end in values {
            out.push((at, end as usize - at));
            at = end as usize;
        }
        return Ok(out);
    }
    let sum = values.iter().try_fold(0i64, |a, &v| a.checked_add(v));
    if sum == Some(total_i) {
        let mut out = Vec::with_capacity(values.len());
        let mut at = 0usize;
        for &len in values {
            out.push((at, len as usize));
            at += len as usize;
        }
        return Ok(out);
    }
    let last = values[values.len() - 1];
    let why = if let Some(k) = values.windows(2).position(|w| w[0] > w[1]) {
        format!(
            "episode ends must increase, but episodes[{}] = {} follows {} (nor do they sum to \
             the {total} frames as lengths would)",
            k + 1,
            values[k + 1],
            values[k]
        )
    } else if last > total_i {
        format!("the last episode ends at {last}, past the data's {total} frames")
    } else {
        format!(
            "the episodes end at {last}, before the data's {total} frames do (as lengths they \
             sum to {})",
            sum.map_or("more than int64 holds".to_string(), |s| s.to_string())
        )
    };
    Err(bad(why))
}

/// A source's clips: the index, each sample's name (its video's) and label.
pub type ClipSet = super::open::Labelled<ClipIndex>;

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
        // A file's type comes with the listing; only a link needs a stat to tell a folder.
        let folder = entry.file_type().is_ok_and(|t| {
            t.is_dir()
                || (t.is_symlink() && std::fs::metadata(entry.path()).is_ok_and(|m| m.is_dir()))
        });
        if is_image(name.as_bytes()) && !folder {
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
        // Every folder that holds frames, or holds a folder that does (looked up once each).
        let mut holding: BTreeSet<&str> = BTreeSet::new();
        for d in dirs.keys() {
            let mut at = d.as_str();
            while !at.is_empty() && holding.insert(at) {
                at = dirname(at);
            }
        }
        for m in zip.members() {
            let name = m.name().trim_end_matches('/');
            if m.name().ends_with('/') && parents.contains(dirname(name)) && !holding.contains(name)
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

/// The clips of an HDF5 file: each row of its datasets a video (frames along the second axis,
/// the seed's `(N, T, ...)`), or, with `episodes`, episodes of one time axis `(T, ...)`.
/// Several datasets read as one clip, each with its frames' offsets.
#[cfg(feature = "hdf5")]
pub fn from_hdf5(source: Arc<dyn Source>, options: &ClipOptions) -> Result<ClipSet> {
    use super::clip::FrameKey;
    use crate::formats::hdf5::{Hdf5File, Selection};
    let at = source.name().to_string();
    let images = &options.images;
    let invalid = |msg: String| Error::new(ErrorKind::InvalidArgument, at.clone(), msg);
    if images.members != Members::All {
        return Err(invalid(
            "members= selects ZIP members; an HDF5 file has none".into(),
        ));
    }
    if options.list.is_some() {
        return Err(invalid(
            "videos= names a list of frame folders; an HDF5 file's videos are its rows or \
             episodes"
                .into(),
        ));
    }
    let strip = |n: &str| n.trim_start_matches('/').to_string();
    let label_name = match &images.labels {
        Labels::Named(n) => Some(strip(n)),
        _ => None,
    };
    let episodes_name = match &options.episodes {
        Some(Episodes::Dataset(n)) => Some(strip(n)),
        _ => None,
    };
    let other = |n: &str| Some(strip(n)) == label_name || Some(strip(n)) == episodes_name;
    let selection = match &options.datasets {
        Some(names) => {
            let wanted: Vec<String> = names.iter().filter(|n| !other(n)).cloned().collect();
            if wanted.is_empty() {
                return Err(invalid("arrays= names no dataset of frames".into()));
            }
            Selection::Names(wanted)
        }
        None => Selection::All,
    };
    let file = Arc::new(Hdf5File::open(
        Arc::clone(&source),
        selection,
        options.cache_bytes,
        images.threads,
    )?);
    let sequences = options.episodes.is_none();
    // Chosen by default, a row of sequences has frames along a second axis: a dataset of one
    // value a row (labels, ids) is left out.
    let chosen: Vec<usize> = (0..file.datasets().len())
        .filter(|&w| !other(file.datasets()[w].name()))
        .filter(|&w| {
            options.datasets.is_some() || !sequences || file.datasets()[w].shape().len() >= 2
        })
        .collect();
    if chosen.is_empty() {
        return Err(invalid(
            "no dataset of frames: a row of (N, T, ...) sequences holds its frames along a \
             second axis, and a time axis (T, ...) needs episodes= (its episode ends or \
             lengths); name the datasets with arrays="
                .into(),
        ));
    }
    let per_row = if sequences {
        let shapes: Vec<(&str, &[usize])> = chosen
            .iter()
            .map(|&w| (file.datasets()[w].name(), file.datasets()[w].shape()))
            .collect();
        let Some(&(first, shape)) = shapes.first() else {
            return Err(invalid("no dataset of frames".into()));
        };
        if shape.len() < 2 {
            return Err(invalid(format!(
                "{first} of shape {shape:?} holds no frames along a second axis; a time axis \
                 needs episodes= (its episode ends or lengths)"
            )));
        }
        if let Some((name, s)) = shapes.iter().find(|(_, s)| s.len() < 2 || s[1] != shape[1]) {
            return Err(Error::new(
                ErrorKind::Inconsistent,
                at.clone(),
                format!(
                    "{name} of shape {s:?} does not hold {} frames a row as {first} does",
                    shape[1]
                ),
            ));
        }
        shape[1]
    } else {
        1
    };
    let total = file.datasets()[chosen[0]].shape()[0] * per_row;
    // Per-dataset offsets: every dataset's frames from the earliest any takes.
    let clip = options.clip;
    let default: Vec<i64> = (0..clip.len).map(|t| (t * clip.step) as i64).collect();
    let given = |name: &str| {
        options
            .offsets
            .iter()
            .find(|(n, _)| strip(n) == strip(name))
            .map(|(_, o)| o.clone())
    };
    for (name, o) in &options.offsets {
        if !chosen
            .iter()
            .any(|&w| strip(file.datasets()[w].name()) == strip(name))
        {
            return Err(Error::new(
                ErrorKind::Key,
                at.clone(),
                format!("offsets= names {name:?}, which is not a dataset read"),
            ));
        }
        if o.is_empty() {
            return Err(invalid(format!("offsets of {name:?} are empty")));
        }
    }
    let own: Vec<Vec<i64>> = chosen
        .iter()
        .map(|&w| given(file.datasets()[w].name()).unwrap_or_else(|| default.clone()))
        .collect();
    let mut clip = clip;
    let shifted: Option<Vec<Vec<usize>>> = if options.offsets.is_empty() {
        None
    } else {
        if matches!(clip.sampling, super::clip::Sampling::Segments { .. }) {
            return Err(invalid(
                "offsets= and sampling='segments' do not go together".into(),
            ));
        }
        let low = own.iter().flatten().copied().min().unwrap_or(0);
        let high = own.iter().flatten().copied().max().unwrap_or(0);
        clip.reach = Some((high - low) as usize + 1);
        Some(
            own.iter()
                .map(|o| o.iter().map(|&d| (d - low) as usize).collect())
                .collect(),
        )
    };
    let keys = chosen
        .iter()
        .enumerate()
        .map(|(j, &w)| {
            Ok(FrameKey {
                w,
                name: strip(file.datasets()[w].name()),
                offsets: shifted.as_ref().map(|s| s[j].clone()),
                view: file.frame_view(w, per_row)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let first_name = keys[0].name.clone();
    let videos: Vec<Video> = if sequences {
        (0..total / per_row.max(1))
            .map(|n| Video {
                name: format!("{at}:{first_name}[{n}]"),
                first: n * per_row,
                frames: per_row,
            })
            .collect()
    } else {
        let values = match &options.episodes {
            Some(Episodes::Values(v)) => v.clone(),
            Some(Episodes::Dataset(name)) => {
                super::open::hdf5_integers(Arc::clone(&source), name, "episodes", images.threads)?
            }
            None => unreachable!("a time axis has episodes"),
        };
        let where_ = match &options.episodes {
            Some(Episodes::Dataset(name)) => format!("{at}:{}", strip(name)),
            _ => format!("{at} (episodes=)"),
        };
        episodes_of(&values, total, &where_)?
            .into_iter()
            .enumerate()
            .map(|(k, (first, frames))| Video {
                name: format!("{at}:episode {k}"),
                first,
                frames,
            })
            .collect()
    };
    let (labels, label_source) = match &label_name {
        Some(name) => {
            let values =
                super::open::hdf5_integers(Arc::clone(&source), name, "labels", images.threads)?;
            if values.len() != videos.len() {
                return Err(Error::new(
                    ErrorKind::Inconsistent,
                    format!("{at}:{name}"),
                    format!(
                        "{} labels for {} {}",
                        values.len(),
                        videos.len(),
                        if sequences { "rows" } else { "episodes" }
                    ),
                ));
            }
            (Some(values), Some(format!("hdf5:{name}")))
        }
        None => (None, None),
    };
    let index = ClipIndex::new(
        Frames::Hdf5 { file, keys },
        videos.clone(),
        clip,
        None,
        images.seed,
        false,
    )?;
    let mut names = Vec::new();
    let mut sample_labels = Vec::new();
    for (v, video) in videos.iter().enumerate() {
        for _ in 0..index.samples_in(v) {
            names.push(OsString::from(&video.name));
            if let Some(l) = &labels {
                sample_labels.push(l[v]);
            }
        }
    }
    Ok(ClipSet {
        index: Arc::new(index),
        names,
        labels: labels.map(|_| sample_labels),
        classes: None,
        label_source,
    })
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
    let index = ClipIndex::new(
        Frames::Images(frames),
        videos,
        options.clip,
        frame_size,
        images.seed,
        skip,
    )?;
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
    fn episodes_are_ends_or_lengths() {
        assert_eq!(
            episodes_of(&[3, 5, 9], 9, "x").unwrap(),
            [(0, 3), (3, 2), (5, 4)]
        );
        assert_eq!(
            episodes_of(&[3, 2, 4], 9, "x").unwrap(),
            [(0, 3), (3, 2), (5, 4)]
        );
        assert_eq!(episodes_of(&[9], 9, "x").unwrap(), [(0, 9)]);
        let e = episodes_of(&[3, 7, 5], 9, "x").unwrap_err();
        assert!(e.message().contains("must increase"), "{e}");
        let e = episodes_of(&[3, 5, 12], 9, "x").unwrap_err();
        assert!(e.message().contains("past the data"), "{e}");
        let e = episodes_of(&[3, 5], 9, "x").unwrap_err();
        assert!(e.message().contains("before the data"), "{e}");
        assert!(episodes_of(&[-1, 9], 9, "x").is_err());
        assert!(episodes_of(&[], 9, "x").is_err());
    }

    #[test]
    fn the_common_folder_of_class_folders() {
        assert_eq!(common_folder(&["root/cat", "root/dog"]), "root");
        assert_eq!(common_folder(&["cat", "dog"]), "");
    }
}
