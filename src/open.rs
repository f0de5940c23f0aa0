//! Opening what a reader reads: a format's index, from where its bytes are (a path or a URL)
//! and the options the reader was given. The one place options become an index, for a reader
//! of one file and for each shard of many (`batch::shards` calls back here, never into the
//! binding), so that every option reaches every shard and a pattern selects alike in each.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::batch::{ArraySpec, Index};
use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};
use crate::formats::image::videos::{self, ClipOptions, ClipSet};
use crate::formats::image::{self, ErrorLog, ImageOptions};
use crate::formats::keyed::{self, KeyedOptions, KeyedSet};
use crate::formats::zip::{self, Members, ZipIndex, ZipLimits, ZipSamples};
use crate::remote::{Caches, FirstRead, ObjectStamp, RemoteFile, StoreOptions};
use crate::source::{self, Source};

/// How many bytes an object's open fetches first when it is read from its start: NPY headers
/// and HDF5 superblocks lie there.
pub const HEAD_BYTES: u64 = 256 << 10;

/// How many bytes an archive's open fetches first, from its end: the end records and (a small)
/// directory.
pub const TAIL_BYTES: u64 = (64 << 10) + 22;

/// The suffixes of HDF5 files (an object is told by its name; a local file also by its
/// signature).
pub const HDF5_SUFFIXES: [&str; 5] = [".h5", ".hdf5", ".hdf", ".he5", ".nc"];

/// How objects in object storage are opened: the client's options and the caches.
#[derive(Debug, Clone, Default)]
pub struct Remote {
    /// The client's options (credentials, region, endpoint, ...).
    pub store: StoreOptions,
    /// The index and data caches.
    pub caches: Caches,
}

/// Where one file is: a local path or a URL, and for an object opened before, what it was
/// then (it is then read as that object, without a request to open it).
#[derive(Debug, Clone)]
pub struct Location {
    /// The path or URL.
    pub name: OsString,
    /// The object's stamp when it was first opened.
    pub stamp: Option<ObjectStamp>,
}

impl Location {
    /// A location by path or URL, not opened before.
    pub fn new(name: impl Into<OsString>) -> Location {
        Location {
            name: name.into(),
            stamp: None,
        }
    }

    /// The URL, when the location is one.
    fn url(&self) -> Option<&str> {
        self.name.to_str().filter(|s| crate::remote::is_url(s))
    }

    fn ends_with_any(&self, suffixes: &[&str]) -> bool {
        let lower = self.name.to_string_lossy().to_lowercase();
        suffixes.iter().any(|s| lower.ends_with(s))
    }
}

/// The source at `location`: a local file (a regular one, see [`source::open_regular`]), or
/// an object opened with one request for its head or tail (`first`), or restored as it was.
pub fn open_source(
    location: &Location,
    remote: &Remote,
    first: FirstRead,
) -> Result<Arc<dyn Source>> {
    let Some(url) = location.url() else {
        return source::local(Path::new(&location.name));
    };
    let file = match &location.stamp {
        Some(stamp) => {
            RemoteFile::restore(url, remote.store.clone(), stamp.clone(), &remote.caches)?
        }
        None => RemoteFile::open(url, remote.store.clone(), first, &remote.caches)?,
    };
    Ok(Arc::new(file))
}

/// The stamp of an object source (`None` for other sources).
pub fn stamp_of(source: &dyn Source) -> Option<ObjectStamp> {
    source
        .as_any()
        .downcast_ref::<RemoteFile>()
        .map(|f| f.stamp().clone())
}

/// What the samples of an archive hold when they are raw bytes or `.npy` members.
#[derive(Debug, Clone, Default)]
pub struct ZipSampleOptions {
    /// Which members are samples.
    pub members: Members,
    /// The dtype raw members are viewed as (default `uint8`), which `.npy` members must hold.
    pub dtype: Option<DType>,
    /// The shape raw members are viewed as (default: one dimension, the first member's size).
    pub shape: Option<Vec<usize>>,
    /// The sample (a position among the chosen members) whose `.npy` header or size sets the
    /// samples' type, where not the first: a batch of members of another kind than the first.
    pub reference: Option<usize>,
}

/// The HDF5 options a reader takes.
#[derive(Debug, Clone, Default)]
pub struct Hdf5Options {
    /// The datasets read (`None`: every one of the file's common sample count).
    pub datasets: Option<Vec<String>>,
    /// The decoded-chunk budget.
    pub cache_bytes: usize,
    /// Read the whole file into memory first.
    pub in_memory: bool,
}

/// Which format a shard is read as, with that format's options.
#[derive(Debug, Clone)]
pub enum Format {
    /// Datasets of HDF5 files.
    #[cfg(feature = "hdf5")]
    Hdf5(Hdf5Options),
    /// Members of ZIP archives as samples.
    Zip(ZipSampleOptions),
    /// Encoded images of archives, folder trees or HDF5 files.
    Images(ImageOptions),
    /// Clips of videos stored as frame folders, on disk or in archives.
    Clips(ClipOptions),
    /// Samples of several members grouped by key (WebDataset's layout), in tar or ZIP
    /// archives.
    Keyed(KeyedFormat),
}

/// Keyed samples' options, and the archive format they are read from.
#[derive(Debug, Clone)]
pub struct KeyedFormat {
    /// Tar archives (else ZIP).
    pub tar: bool,
    /// The fields and how they are read.
    pub options: KeyedOptions,
}

/// Everything a reader was given, for its one file or every shard.
#[derive(Debug, Clone)]
pub struct Options {
    /// The format and its options.
    pub format: Format,
    /// Limits for archives (members, member size, NPY headers) and whether CRCs are checked.
    pub zip: ZipLimits,
    /// How objects are opened.
    pub remote: Remote,
    /// A pool of the reader's own.
    pub threads: Option<usize>,
}

/// One file opened: its index, and what a reader tells of its samples beyond the arrays.
pub struct Opened {
    /// The samples.
    pub index: Arc<dyn Index>,
    /// Each sample's name, where samples have names (members, image files).
    pub names: Vec<OsString>,
    /// Each sample's label, where the file has labels.
    pub labels: Option<Vec<i64>>,
    /// The class names by label, where the file names them.
    pub classes: Option<Vec<OsString>>,
    /// Where the labels came from.
    pub label_source: Option<String>,
    /// The images found not to decode (with `skip`), kept beyond the index.
    pub errors: Option<ErrorLog>,
    /// The object's stamp, for a file in object storage.
    pub stamp: Option<ObjectStamp>,
    /// Samples stored (and decoded) together.
    pub samples_per_chunk: usize,
    /// Samples left out for a missing field: `(key, batch key)` (keyed samples).
    pub skipped: Vec<(String, String)>,
}

impl Opened {
    fn plain(index: Arc<dyn Index>, names: Vec<OsString>, stamp: Option<ObjectStamp>) -> Opened {
        Opened {
            index,
            names,
            labels: None,
            classes: None,
            label_source: None,
            errors: None,
            stamp,
            samples_per_chunk: 1,
            skipped: Vec::new(),
        }
    }
}

/// The samples `select` picks of `zip`, as [`ZipSamples`] of the type the first of them
/// holds, and their names. `shard`: one of many, where a pattern may match nothing.
pub fn zip_samples(
    zip: Arc<ZipIndex>,
    select: &ZipSampleOptions,
    threads: Option<usize>,
    shard: bool,
) -> Result<(ZipSamples, Vec<OsString>)> {
    let chosen = zip.select(&select.members, |_| true, false)?;
    if chosen.is_empty() && !shard {
        if let Members::Pattern(p) = &select.members {
            return Err(Error::new(
                ErrorKind::Key,
                zip.location(),
                format!("no member matches {}", image::py_repr(p)),
            ));
        }
    }
    let reference = match select.reference {
        Some(r) if r >= chosen.len() => {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                zip.location(),
                format!("reference sample {r} of {} members", chosen.len()),
            ))
        }
        Some(r) => r,
        None => 0,
    };
    let payload = zip::sample_payload(
        &zip,
        &chosen,
        reference,
        select.dtype.clone(),
        select.shape.clone(),
    )?;
    let names = chosen
        .iter()
        .map(|&i| OsString::from(zip.members()[i].name()))
        .collect();
    let samples = ZipSamples::new(zip, chosen, payload, threads)?;
    Ok((samples, names))
}

/// Opens `location` as `options` say. `shard`: its number among many (image crops are drawn
/// from a seed of each shard's own, and a members pattern may match nothing in it).
pub fn open(location: &Location, options: &Options, shard: Option<usize>) -> Result<Opened> {
    match &options.format {
        #[cfg(feature = "hdf5")]
        Format::Hdf5(h) => {
            let source = open_source(location, &options.remote, FirstRead::Head(HEAD_BYTES))?;
            let stamp = stamp_of(&*source);
            let file = hdf5(source, h, options.threads)?;
            let per_chunk = file.samples_per_chunk();
            let mut opened = Opened::plain(Arc::new(file), Vec::new(), stamp);
            opened.samples_per_chunk = per_chunk;
            Ok(opened)
        }
        Format::Zip(select) => {
            let source = open_source(location, &options.remote, FirstRead::Tail(TAIL_BYTES))?;
            let stamp = stamp_of(&*source);
            let zip = Arc::new(ZipIndex::open(source, options.zip)?);
            let (samples, names) = zip_samples(zip, select, options.threads, shard.is_some())?;
            Ok(Opened::plain(Arc::new(samples), names, stamp))
        }
        Format::Images(images) => {
            let mut images = images.clone();
            images.threads = options.threads;
            if let Some(k) = shard {
                // Sample 0 of every shard would crop alike otherwise.
                images.seed = images
                    .seed
                    .wrapping_add((k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            }
            open_images(location, &images, options, shard.is_some())
        }
        Format::Keyed(keyed) => {
            let mut keyed = keyed.clone();
            keyed.options.images.threads = options.threads;
            if let Some(k) = shard {
                // Sample 0 of every shard would crop alike otherwise.
                let images = &mut keyed.options.images;
                images.seed = images
                    .seed
                    .wrapping_add((k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            }
            // A tar is walked from its start; a ZIP object's directory is at its end.
            let first = if keyed.tar || location.url().is_none() {
                FirstRead::Head(HEAD_BYTES)
            } else {
                FirstRead::Tail(TAIL_BYTES)
            };
            let source = open_source(location, &options.remote, first)?;
            let stamp = stamp_of(&*source);
            let set = keyed_in(
                source,
                &keyed,
                options.zip,
                &options.remote.caches,
                options.threads,
            )?;
            let errors = set.index.error_log();
            Ok(Opened {
                errors: Some(errors),
                skipped: set.skipped,
                ..Opened::plain(set.index, set.names, stamp)
            })
        }
        Format::Clips(clips) => {
            let mut clips = clips.clone();
            clips.images.threads = options.threads;
            if let Some(k) = shard {
                // Sample 0 of every shard would draw alike otherwise.
                clips.images.seed = clips
                    .images
                    .seed
                    .wrapping_add((k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            }
            let remote = location.url().is_some();
            if !remote && Path::new(&location.name).is_dir() {
                let set = videos::from_folder(Path::new(&location.name), &clips)?;
                return Ok(from_set(set, None));
            }
            let source = open_source(location, &options.remote, first_read(location))?;
            let stamp = stamp_of(&*source);
            Ok(from_set(
                clips_in(source, &clips, options.zip, shard.is_some())?,
                stamp,
            ))
        }
    }
}

/// The keyed samples of the tar or ZIP archive at `source`.
pub fn keyed_in(
    source: Arc<dyn Source>,
    keyed: &KeyedFormat,
    zip: ZipLimits,
    caches: &Caches,
    threads: Option<usize>,
) -> Result<KeyedSet> {
    let index = if keyed.tar {
        // A local file's walk is kept in the index cache too (an object's is, by its source).
        let local = match &caches.index {
            Some(dir) if !source.waits() && source.bytes().is_none() => {
                crate::remote::local_index(dir, Path::new(source.name()))
            }
            _ => None,
        };
        ZipIndex::from_tar(source, zip, local.as_ref())?
    } else {
        ZipIndex::open(source, zip)?
    };
    keyed::open(Arc::new(index), &keyed.options, threads)
}

/// The clips of an archive holding frame folders at `source`.
pub fn clips_in(
    source: Arc<dyn Source>,
    clips: &ClipOptions,
    zip: ZipLimits,
    shard: bool,
) -> Result<ClipSet> {
    let lower = source.name().to_lowercase();
    let named_hdf5 = HDF5_SUFFIXES.iter().any(|s| lower.ends_with(s));
    #[cfg(feature = "hdf5")]
    if named_hdf5 || (!source.waits() && image::open::is_hdf5(&*source)) {
        return videos::from_hdf5(source, clips);
    }
    #[cfg(not(feature = "hdf5"))]
    let _ = named_hdf5;
    let zip = Arc::new(ZipIndex::open(source, zip)?);
    videos::from_zip(zip, clips, shard)
}

/// What an open of a file that is an archive or an HDF5 file (images, clips) fetches first: a
/// local file or an object named as HDF5 from its head (the superblock), an archive object from
/// its tail (the directory).
fn first_read(location: &Location) -> FirstRead {
    if location.url().is_none() || location.ends_with_any(&HDF5_SUFFIXES) {
        FirstRead::Head(HEAD_BYTES)
    } else {
        FirstRead::Tail(TAIL_BYTES)
    }
}

/// The images at `location`: a folder tree, an HDF5 file (told by its name, or a local file by
/// its signature) or an archive.
fn open_images(
    location: &Location,
    images: &ImageOptions,
    options: &Options,
    shard: bool,
) -> Result<Opened> {
    let remote = location.url().is_some();
    if !remote && Path::new(&location.name).is_dir() {
        return Ok(from_set(
            image::open::from_folder(Path::new(&location.name), images)?,
            None,
        ));
    }
    let source = open_source(location, &options.remote, first_read(location))?;
    let stamp = stamp_of(&*source);
    Ok(from_set(
        images_in(source, images, options.zip, shard)?,
        stamp,
    ))
}

/// The images in `source`: the rows of an HDF5 file (told by its name's suffix, or a source
/// that does not wait on a network by its signature), else the members of an archive.
pub fn images_in(
    source: Arc<dyn Source>,
    images: &ImageOptions,
    zip: ZipLimits,
    shard: bool,
) -> Result<image::ImageSet> {
    let lower = source.name().to_lowercase();
    let named_hdf5 = HDF5_SUFFIXES.iter().any(|s| lower.ends_with(s));
    #[cfg(feature = "hdf5")]
    if named_hdf5 || (!source.waits() && image::open::is_hdf5(&*source)) {
        return image::open::from_hdf5(source, images);
    }
    #[cfg(not(feature = "hdf5"))]
    let _ = named_hdf5;
    let zip = Arc::new(ZipIndex::open(source, zip)?);
    image::open::from_zip(zip, images, shard)
}

/// Samples whose failures to decode are logged beyond their index (images, clips).
pub trait Logged: Index + 'static {
    /// The log of samples found not to decode.
    fn error_log(&self) -> ErrorLog;
}

impl Logged for image::ImageIndex {
    fn error_log(&self) -> ErrorLog {
        image::ImageIndex::error_log(self)
    }
}

impl Logged for keyed::KeyedIndex {
    fn error_log(&self) -> ErrorLog {
        keyed::KeyedIndex::error_log(self)
    }
}

impl Logged for image::clip::ClipIndex {
    fn error_log(&self) -> ErrorLog {
        image::clip::ClipIndex::error_log(self)
    }
}

fn from_set<I: Logged>(set: image::open::Labelled<I>, stamp: Option<ObjectStamp>) -> Opened {
    let errors = set.index.error_log();
    Opened {
        labels: set.labels,
        classes: set.classes,
        label_source: set.label_source,
        errors: Some(errors),
        ..Opened::plain(set.index, set.names, stamp)
    }
}

/// An HDF5 file from `source` (read whole into memory first with `in_memory`).
#[cfg(feature = "hdf5")]
pub fn hdf5(
    source: Arc<dyn Source>,
    options: &Hdf5Options,
    threads: Option<usize>,
) -> Result<crate::formats::hdf5::Hdf5File> {
    use crate::formats::hdf5::{Hdf5File, Selection};
    let source = if options.in_memory {
        let mut bytes = vec![0u8; usize::try_from(source.len()).unwrap_or(usize::MAX)];
        source.read_at(0, &mut bytes)?;
        source::memory(source.name(), bytes)
    } else {
        source
    };
    let selection = match &options.datasets {
        Some(names) => Selection::Names(names.clone()),
        None => Selection::All,
    };
    Hdf5File::open(source, selection, options.cache_bytes, threads)
}

/// What every shard of a reader must agree on, and what was counted of each: saved in a
/// reader's pickle and index file, so that a reopen opens no shard until a batch touches it.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardState {
    /// Samples in each shard.
    pub lengths: Vec<usize>,
    /// The arrays every shard holds (those of the first shard holding samples).
    pub arrays: Vec<ArraySpec>,
    /// Every sample's label, shards concatenated, where shards have labels.
    pub labels: Option<Vec<i64>>,
    /// The classes every shard has, where they name them.
    pub classes: Option<Vec<OsString>>,
    /// Each shard's object stamp, for shards in object storage.
    pub stamps: Vec<Option<ObjectStamp>>,
    /// The first shard holding samples (what the others are checked against).
    pub first: usize,
    /// Samples stored (and decoded) together, in the first shard.
    pub samples_per_chunk: usize,
    /// Samples left out for a missing field (keyed samples): `(shard, key, batch key)`.
    pub skipped: Vec<(usize, String, String)>,
}

/// Shard `k` (at `locations[k]`) must hold what the first shard holding samples holds.
pub fn check_shard(
    locations: &[Location],
    k: usize,
    arrays: &[ArraySpec],
    classes: Option<&[OsString]>,
    state: &ShardState,
) -> Result<()> {
    let name = |i: usize| crate::source::shown(Path::new(&locations[i].name));
    if arrays != state.arrays.as_slice() {
        return Err(Error::new(
            ErrorKind::Inconsistent,
            name(k),
            format!(
                "shard {k} holds {}, but {} holds {}",
                spec_text(arrays),
                name(state.first),
                spec_text(&state.arrays)
            ),
        ));
    }
    if classes != state.classes.as_deref() {
        return Err(Error::new(
            ErrorKind::Inconsistent,
            name(k),
            format!(
                "shard {k} has classes {:?}, but {} has {:?}; its labels would mean other \
                 classes",
                classes.unwrap_or_default(),
                name(state.first),
                state.classes.as_deref().unwrap_or_default()
            ),
        ));
    }
    Ok(())
}

fn spec_text(arrays: &[ArraySpec]) -> String {
    let parts: Vec<String> = arrays
        .iter()
        .map(|a| {
            let name = a.name.trim_start_matches('/');
            match &a.ragged {
                Some(r) => format!("'{name}' {} of {} (ragged)", dtype_name(&r.dtype), r.kind),
                None => format!("'{name}' {} {}", dtype_name(&a.dtype), tuple_text(&a.shape)),
            }
        })
        .collect();
    parts.join(", ")
}

/// A shape as Python writes a tuple: `()`, `(3,)`, `(5, 4)`.
fn tuple_text(shape: &[usize]) -> String {
    match shape {
        [one] => format!("({one},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A dtype by numpy's name where it has a plain one (`float64`, `uint8`), else its descr.
fn dtype_name(dtype: &crate::dtype::DType) -> String {
    let descr = dtype.descr();
    let Some(text) = descr.as_str() else {
        return descr.to_string();
    };
    let code = text.trim_start_matches(['<', '>', '|', '=']);
    let (kind, size) = code.split_at(code.len().min(1));
    let Ok(size) = size.parse::<usize>() else {
        return text.to_string();
    };
    match kind {
        "f" => format!("float{}", size * 8),
        "i" => format!("int{}", size * 8),
        "u" => format!("uint{}", size * 8),
        "c" => format!("complex{}", size * 8),
        "b" if size == 1 => "bool".to_string(),
        _ => text.to_string(),
    }
}

/// A shard left open by counting: its number and its index.
pub type KeptShard = (usize, Arc<dyn Index>);

/// Counts shards: opens each once (one at a time beyond the `keep` first kept open), checks
/// each against the first that holds samples, and records what [`ShardState`] keeps. The
/// opened shards kept come back too, with every shard's error log (`logs`).
pub fn count(
    locations: &[Location],
    options: &Options,
    keep: usize,
    logs: &Mutex<Vec<(usize, ErrorLog)>>,
) -> Result<(ShardState, Vec<KeptShard>)> {
    let mut state = ShardState {
        lengths: Vec::with_capacity(locations.len()),
        arrays: Vec::new(),
        labels: None,
        classes: None,
        stamps: Vec::with_capacity(locations.len()),
        first: 0,
        samples_per_chunk: 1,
        skipped: Vec::new(),
    };
    let mut found = false;
    let mut labelled: Vec<Option<Vec<i64>>> = Vec::new();
    let mut kept = Vec::new();
    // Keyed samples: which shard each key is in (a key in two shards is two samples that
    // webdataset would read as one, or not: refused). Kept as 64-bit hashes, 16 bytes a key
    // rather than the key itself; a hash seen before is checked against the other shard's
    // names, so that a collision refuses nothing.
    let mut keys: HashMap<u64, usize> = HashMap::new();
    let keyed = matches!(options.format, Format::Keyed(_));
    for (k, location) in locations.iter().enumerate() {
        let one = open(location, options, Some(k))?;
        state.skipped.extend(
            one.skipped
                .iter()
                .map(|(key, f)| (k, key.clone(), f.clone())),
        );
        if keyed {
            for name in &one.names {
                let hash = crate::remote::index_cache::fnv1a(name.as_encoded_bytes());
                match keys.insert(hash, k) {
                    Some(other) if other != k => {
                        let theirs = open(&locations[other], options, Some(other))?.names;
                        if theirs.contains(name) {
                            return Err(Error::new(
                                ErrorKind::Inconsistent,
                                crate::source::shown(Path::new(&location.name)),
                                format!(
                                    "key {:?} is in two shards: this one and {}",
                                    name.to_string_lossy(),
                                    crate::source::shown(Path::new(&locations[other].name))
                                ),
                            ));
                        }
                    }
                    _ => {}
                }
            }
        }
        state.stamps.push(one.stamp.clone());
        state.lengths.push(one.index.len());
        if let Some(log) = &one.errors {
            logs.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((k, Arc::clone(log)));
        }
        if one.index.is_empty() {
            continue;
        }
        if !found {
            found = true;
            state.first = k;
            state.arrays = one.index.arrays().to_vec();
            state.classes = one.classes.clone();
            state.samples_per_chunk = one.samples_per_chunk;
        }
        check_shard(
            locations,
            k,
            one.index.arrays(),
            one.classes.as_deref(),
            &state,
        )?;
        labelled.push(one.labels);
        if kept.len() < keep {
            kept.push((k, one.index));
        }
    }
    if !found {
        // Every shard is empty: a pattern matching nothing in any is the error; otherwise
        // the first shard's arrays.
        let members = match &options.format {
            Format::Zip(z) => Some(&z.members),
            Format::Images(i) => Some(&i.members),
            Format::Clips(c) => Some(&c.images.members),
            Format::Keyed(_) => None,
            #[cfg(feature = "hdf5")]
            Format::Hdf5(_) => None,
        };
        if let Some(Members::Pattern(p)) = members {
            return Err(Error::new(
                ErrorKind::Key,
                crate::source::shown(Path::new(&locations[0].name)),
                format!(
                    "no member matches {} in any of the {} shards",
                    image::py_repr(p),
                    locations.len()
                ),
            ));
        }
        let one = open(&locations[0], options, Some(0))?;
        state.arrays = one.index.arrays().to_vec();
        state.classes = one.classes;
        state.samples_per_chunk = one.samples_per_chunk;
    }
    let with = labelled.iter().filter(|l| l.is_some()).count();
    if with > 0 && with < labelled.len() {
        return Err(Error::new(
            ErrorKind::Inconsistent,
            crate::source::shown(Path::new(&locations[state.first].name)),
            "some shards have labels, some not",
        ));
    }
    if with > 0 {
        state.labels = Some(labelled.into_iter().flatten().flatten().collect());
    }
    Ok((state, kept))
}

/// The shards at `locations` as one index, as `state` counted them: each opened (as
/// `options` say) when a batch first touches it, checked against the state, its error log
/// added to `logs`; `kept` are shards open already.
pub fn shards(
    locations: Vec<Location>,
    options: Arc<Options>,
    state: Arc<ShardState>,
    max_open: usize,
    kept: Vec<KeptShard>,
    logs: Arc<Mutex<Vec<(usize, ErrorLog)>>>,
) -> Result<crate::batch::shards::Shards> {
    if locations.len() != state.lengths.len() || locations.len() != state.stamps.len() {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            "",
            format!(
                "{} shards for a state of {} lengths",
                locations.len(),
                state.lengths.len()
            ),
        ));
    }
    let names = locations
        .iter()
        .map(|l| crate::source::shown(Path::new(&l.name)))
        .collect();
    let threads = options.threads;
    let arrays = state.arrays.clone();
    let lengths = state.lengths.clone();
    let opener = Box::new(move |k: usize| -> Result<Arc<dyn Index>> {
        let mut location = locations[k].clone();
        location.stamp.clone_from(&state.stamps[k]);
        let one = open(&location, &options, Some(k))?;
        if !one.index.is_empty() {
            check_shard(
                &locations,
                k,
                one.index.arrays(),
                one.classes.as_deref(),
                &state,
            )?;
        }
        if let Some(log) = one.errors {
            logs.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((k, log));
        }
        Ok(one.index)
    });
    crate::batch::shards::Shards::new(names, &lengths, arrays, opener, max_open, kept, threads)
}
