//! Which images a source holds, what they are named and how they are labelled: a ZIP
//! archive's image members (by pattern or names; labelled by a JSON member or by an
//! `ImageFolder` tree packed in it), a folder tree on disk, or the rows of an HDF5 dataset of
//! bytes (labelled by an integer dataset). The same rules open a reader of one file and each
//! shard of many.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;

use super::labels::from_json;
use super::tree::{self, is_image};
use super::{ImageBytes, ImageIndex};
use crate::codec::image::geometry::ImageSpec;
use crate::error::{Error, ErrorKind, Result};
use crate::formats::zip::{Members, ZipIndex};
use crate::source::{FileList, Source, StampedPath};

/// The JSON member read for labels when none is named (the tutorial's convention).
pub const LABELS_MEMBER: &str = "dataset.json";

/// Largest labels member read.
const MAX_LABELS_BYTES: u64 = 64 << 20;

/// Where labels come from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Labels {
    /// A `dataset.json` member when the archive holds one, else the class folders of a tree;
    /// none otherwise.
    #[default]
    Auto,
    /// No labels.
    Off,
    /// This JSON member of an archive, or this integer dataset of an HDF5 file.
    Named(String),
}

/// How a source's images are found and decoded.
#[derive(Debug, Clone)]
pub struct ImageOptions {
    /// What each sample becomes.
    pub spec: ImageSpec,
    /// The seed random crops are drawn from (with the epoch and the sample).
    pub seed: u64,
    /// Replace an image that does not decode by the next that does.
    pub skip: bool,
    /// Which members of an archive are images.
    pub members: Members,
    /// Where labels come from.
    pub labels: Labels,
    /// The HDF5 dataset whose rows are the images.
    pub dataset: Option<String>,
    /// A pool of the reader's own.
    pub threads: Option<usize>,
}

/// A source's named samples: the index that reads them (`I`: images, clips), their names and
/// labels.
pub struct Labelled<I> {
    /// The samples.
    pub index: Arc<I>,
    /// Each sample's name: a member's, a file's path, `dataset[k]`, a clip's video.
    pub names: Vec<OsString>,
    /// Each sample's label, where the source has labels.
    pub labels: Option<Vec<i64>>,
    /// The class names by label, where the source names them.
    pub classes: Option<Vec<OsString>>,
    /// Where the labels came from: `"folders"`, the JSON member's or list file's name,
    /// `"hdf5:<dataset>"`.
    pub label_source: Option<String>,
}

/// A source's images.
pub type ImageSet = Labelled<ImageIndex>;

fn invalid(at: impl Into<String>, msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidArgument, at, msg)
}

fn index(bytes: ImageBytes, names: &[OsString], options: &ImageOptions) -> Result<Arc<ImageIndex>> {
    let shown = names
        .iter()
        .map(|n| crate::source::shown(Path::new(n)))
        .collect();
    Ok(Arc::new(ImageIndex::new(
        bytes,
        shown,
        options.spec.clone(),
        options.seed,
        options.skip,
        options.threads,
    )?))
}

/// The images of an archive. `shard`: one of many, where a pattern may match nothing (the
/// shard then holds no samples).
pub fn from_zip(zip: Arc<ZipIndex>, options: &ImageOptions, shard: bool) -> Result<ImageSet> {
    let at = zip.location().to_string();
    if options.dataset.is_some() {
        return Err(invalid(
            at,
            "images= names an HDF5 dataset of images, and this is not an HDF5 file",
        ));
    }
    let chosen = zip.select(&options.members, |n| is_image(n.as_bytes()), true)?;
    // A shard may hold no images: a pattern matching none of its members, or a writer's last
    // archive holding nothing but folders and a labels file. Other files only: a wrong file.
    let holds_nothing = || {
        zip.members().iter().all(|m| {
            let name = m.name();
            name.ends_with('/') || name.rsplit('/').next() == Some(LABELS_MEMBER)
        })
    };
    let empty_shard = shard && (matches!(options.members, Members::Pattern(_)) || holds_nothing());
    if chosen.is_empty() && !empty_shard {
        return Err(invalid(
            at,
            format!(
                "no members are images (members={})",
                options.members.describe()
            ),
        ));
    }
    let mut names: Vec<String> = chosen
        .iter()
        .map(|&i| zip.members()[i].name().to_string())
        .collect();
    let member = match &options.labels {
        Labels::Named(m) => Some(m.clone()),
        Labels::Auto if zip.position(LABELS_MEMBER).is_ok() => Some(LABELS_MEMBER.to_string()),
        _ => None,
    };
    let mut labels = None;
    let mut classes = None;
    let mut label_source = None;
    if let Some(member) = member {
        let pos = zip.position(&member)?;
        if zip.members()[pos].size() > MAX_LABELS_BYTES {
            return Err(invalid(
                zip.member_location(pos),
                "the labels member is over 64 MiB",
            ));
        }
        let raw = zip.read(pos)?;
        let (l, c) = from_json(&raw, &zip.member_location(pos), &names)?;
        labels = Some(l);
        classes = c.map(|c| c.into_iter().map(OsString::from).collect());
        label_source = Some(member);
    } else if options.labels == Labels::Auto && options.members == Members::All {
        if let Some((ordered, c, l)) = tree::in_archive(&names) {
            names = ordered;
            labels = Some(l);
            classes = Some(c.into_iter().map(OsString::from).collect());
            label_source = Some("folders".to_string());
        }
    }
    let members = names
        .iter()
        .map(|n| zip.position(n))
        .collect::<Result<Vec<_>>>()?;
    let names: Vec<OsString> = names.into_iter().map(OsString::from).collect();
    let index = index(ImageBytes::Zip { zip, members }, &names, options)?;
    Ok(ImageSet {
        index,
        names,
        labels,
        classes,
        label_source,
    })
}

/// The images of an `ImageFolder` tree on disk.
pub fn from_folder(root: &Path, options: &ImageOptions) -> Result<ImageSet> {
    let at = crate::source::shown(root);
    if options.members != Members::All {
        return Err(invalid(
            at,
            "members= selects ZIP members; a folder has none",
        ));
    }
    if options.dataset.is_some() {
        return Err(invalid(
            at,
            "images= names an HDF5 dataset of images, and this is not an HDF5 file",
        ));
    }
    let tree = tree::folder(root)?;
    let sources = tree
        .paths
        .iter()
        .map(|p| Ok(Arc::new(StampedPath::stamped(p.clone())?) as Arc<dyn Source>))
        .collect::<Result<Vec<_>>>()?;
    let names: Vec<OsString> = tree.paths.into_iter().map(OsString::from).collect();
    let index = index(ImageBytes::Files(FileList::new(sources)), &names, options)?;
    Ok(ImageSet {
        index,
        names,
        labels: Some(tree.labels),
        classes: Some(tree.classes),
        label_source: Some("folders".to_string()),
    })
}

/// The images in the rows of an HDF5 dataset (`options.dataset`), labelled by the integer
/// dataset `options.labels` names.
#[cfg(feature = "hdf5")]
pub fn from_hdf5(source: Arc<dyn Source>, options: &ImageOptions) -> Result<ImageSet> {
    use crate::formats::hdf5::{Hdf5File, Selection};
    let at = source.name().to_string();
    let Some(dataset) = options.dataset.clone() else {
        return Err(invalid(
            at,
            "name the dataset of encoded images with images=",
        ));
    };
    if options.members != Members::All {
        return Err(invalid(
            at,
            "members= selects ZIP members; an HDF5 file has none",
        ));
    }
    let file = Arc::new(Hdf5File::open(
        Arc::clone(&source),
        Selection::Names(vec![dataset.clone()]),
        0,
        options.threads,
    )?);
    let count = crate::batch::Index::len(&*file);
    let shown = dataset.trim_start_matches('/').to_string();
    let names: Vec<OsString> = (0..count)
        .map(|k| OsString::from(format!("{shown}[{k}]")))
        .collect();
    let (labels, label_source) = match &options.labels {
        Labels::Named(name) => (
            Some(hdf5_labels(source, name, count, options.threads)?),
            Some(format!("hdf5:{name}")),
        ),
        Labels::Auto | Labels::Off => (None, None),
    };
    let index = index(ImageBytes::Hdf5 { file, dataset: 0 }, &names, options)?;
    Ok(ImageSet {
        index,
        names,
        labels,
        classes: None,
        label_source,
    })
}

/// The integer dataset `name` of `source`, one label a row, as int64.
#[cfg(feature = "hdf5")]
fn hdf5_labels(
    source: Arc<dyn Source>,
    name: &str,
    count: usize,
    threads: Option<usize>,
) -> Result<Vec<i64>> {
    let at = format!("{}:{name}", source.name());
    let labels = hdf5_integers(source, name, "labels", threads)?;
    if labels.len() != count {
        return Err(invalid(
            at,
            format!("{} labels for {count} images", labels.len()),
        ));
    }
    Ok(labels)
}

/// The one-dimensional integer dataset `name` of `source` (`what` it holds, for errors), as
/// int64.
#[cfg(feature = "hdf5")]
pub(super) fn hdf5_integers(
    source: Arc<dyn Source>,
    name: &str,
    what: &str,
    threads: Option<usize>,
) -> Result<Vec<i64>> {
    use crate::batch::Index;
    use crate::dtype::literal::Literal;
    use crate::formats::hdf5::{Hdf5File, Selection};
    let at = format!("{}:{name}", source.name());
    let file = Hdf5File::open(source, Selection::Names(vec![name.to_string()]), 0, threads)?;
    let spec = &file.arrays()[0];
    let descr = match spec.dtype.descr() {
        Literal::Str(d) => d.clone(),
        other => other.to_string(),
    };
    let integer = descr.len() == 3
        && matches!(&descr[1..2], "i" | "u")
        && matches!(&descr[2..3], "1" | "2" | "4" | "8");
    if !integer || !spec.shape.is_empty() || spec.ragged.is_some() {
        return Err(invalid(
            at,
            format!(
                "{what} must be one integer a row, not {descr} x {:?}",
                spec.shape
            ),
        ));
    }
    let count = file.len();
    let item = spec.dtype.itemsize();
    let mut raw = vec![0u8; count * item];
    let rows = crate::batch::Rows::resolve(&(0..count as i64).collect::<Vec<_>>(), count, &at)?;
    crate::batch::read_batch(&file, &rows, &[0], &mut [&mut raw])?;
    let big = descr.starts_with('>');
    let signed = &descr[1..2] == "i";
    raw.chunks_exact(item)
        .enumerate()
        .map(|(k, b)| {
            let mut le = [0u8; 8];
            let fill = if signed && (if big { b[0] } else { b[item - 1] }) & 0x80 != 0 {
                0xFF
            } else {
                0
            };
            le.fill(fill);
            for (j, &byte) in b.iter().enumerate() {
                le[if big { item - 1 - j } else { j }] = byte;
            }
            let v = i64::from_le_bytes(le);
            if !signed && item == 8 && v < 0 {
                return Err(invalid(
                    at.clone(),
                    format!(
                        "{what}[{k}] is {}, over int64's range",
                        u64::from_le_bytes(le)
                    ),
                ));
            }
            Ok(v)
        })
        .collect()
}

/// Whether `source` holds an HDF5 file: the superblock's signature at byte 0 or, after a
/// user block, at 512, 1024, 2048, ... (within the first MiB).
pub fn is_hdf5(source: &dyn Source) -> bool {
    const SIGNATURE: &[u8; 8] = b"\x89HDF\r\n\x1a\n";
    let mut at = 0u64;
    let mut buf = [0u8; 8];
    while at + 8 <= source.len() && at <= 1 << 20 {
        if source.read_meta(at, &mut buf).is_ok() && &buf == SIGNATURE {
            return true;
        }
        at = if at == 0 { 512 } else { at * 2 };
    }
    false
}
