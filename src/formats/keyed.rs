//! Samples made of several members that share a key, as WebDataset lays out tar shards (and
//! ZIPs written the same way): `000123.jpg`, `000123.cls` and `000123.json` are one sample,
//! `000123`, with three fields.
//!
//! A member's name splits as webdataset splits it ([`split_key`]): the key is the path up to
//! the first dot of the base name, the field the rest, lower-cased (`a/b.c.jpg`: key `a/b`,
//! field `c.jpg`). The chosen fields each become one array of the batch, read by the reader of
//! its kind over the same archive ([`Kind`]): images decoded on the pool, integer labels,
//! `.npy` arrays, and bytes (JSON and text are bytes here; Python parses them). [`KeyedIndex`]
//! is those readers side by side: one plan, one run.

use std::collections::HashMap;
use std::ffi::OsString;
use std::sync::Arc;

use super::image::open::ImageOptions;
use super::image::{ErrorLog, ImageBytes, ImageIndex};
use super::zip::{Payload, SamplePayload, ZipIndex, ZipSamples};
use crate::batch::pool::Work;
use crate::batch::{After, ArraySpec, Index, Plan, Ragged, RaggedBatch, RaggedKind, Rows, Tag};
use crate::codec::{Faults, NpyExpect};
use crate::dtype::literal::Literal;
use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};
use crate::source::Files;

/// What a field's members hold, and so how they are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Encoded images (JPEG, PNG, WebP), decoded as the image options say.
    Image,
    /// An integer written as text (webdataset's `.cls`), read as int64.
    Int,
    /// `.npy` arrays of one dtype and shape.
    Npy,
    /// `.npy` arrays of one dtype, each of its own shape (a ragged array).
    NpyRagged,
    /// JSON text (bytes here; parsed in Python).
    Json,
    /// UTF-8 text (bytes here; decoded in Python).
    Text,
    /// Bytes as they are.
    Bytes,
}

impl Kind {
    /// The kind a field's name says, by its last extension, as webdataset's default decoders
    /// tell them.
    pub fn of_field(field: &str) -> Kind {
        let ext = field.rsplit('.').next().unwrap_or(field);
        match ext {
            "jpg" | "jpeg" | "png" | "webp" => Kind::Image,
            "cls" | "cls2" | "class" | "count" | "index" | "inx" | "id" => Kind::Int,
            "npy" => Kind::Npy,
            "json" | "jsn" => Kind::Json,
            "txt" | "text" | "transcript" => Kind::Text,
            _ => Kind::Bytes,
        }
    }

    /// The kind named `name` (`"image"`, `"int"`, ...).
    pub fn parse(name: &str) -> Option<Kind> {
        Some(match name {
            "image" => Kind::Image,
            "int" => Kind::Int,
            "npy" => Kind::Npy,
            "npy-ragged" => Kind::NpyRagged,
            "json" => Kind::Json,
            "text" => Kind::Text,
            "bytes" => Kind::Bytes,
            _ => return None,
        })
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Image => "image",
            Kind::Int => "int",
            Kind::Npy => "npy",
            Kind::NpyRagged => "npy-ragged",
            Kind::Json => "json",
            Kind::Text => "text",
            Kind::Bytes => "bytes",
        }
    }
}

/// One field a sample must have: the batch key it is read into, the field names that may
/// hold it (the first present wins, as in webdataset's `to_tuple("jpg;png")`), and its kind
/// (`None`: from the first name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldSpec {
    /// The batch key.
    pub key: String,
    /// Field names, in order of preference.
    pub names: Vec<String>,
    /// How it is read.
    pub kind: Option<Kind>,
}

impl FieldSpec {
    /// The kind it is read as.
    pub fn kind(&self) -> Kind {
        self.kind
            .unwrap_or_else(|| Kind::of_field(self.names.first().map_or("", String::as_str)))
    }
}

/// What a keyed reader was given.
#[derive(Debug, Clone)]
pub struct KeyedOptions {
    /// The fields read (`None`: every field of the first sample).
    pub fields: Option<Vec<FieldSpec>>,
    /// How image fields decode (and the seed of their random crops, `skip`).
    pub images: ImageOptions,
    /// Leave out samples missing a field (else that is an error).
    pub skip_missing: bool,
    /// Kinds by batch key, over what the field names say.
    pub kinds: Vec<(String, Kind)>,
}

/// A member's name as key and field (webdataset's split), or `None` for a member that is no
/// field of any sample: a base name with no dot or starting with one, or webdataset's meta
/// files (`__key__`-style names).
pub fn split_key(name: &str) -> Option<(&str, String)> {
    if let Some(rest) = name.strip_prefix("__") {
        let first = rest.split('/').next().unwrap_or(rest);
        if first.ends_with("__") {
            return None;
        }
    }
    let base_at = name.rfind('/').map_or(0, |i| i + 1);
    let dot = name[base_at..].find('.')?;
    if dot == 0 {
        return None;
    }
    let (key, field) = (&name[..base_at + dot], &name[base_at + dot + 1..]);
    Some((key, field.to_lowercase()))
}

/// One sample: its key and its fields' member positions, in archive order.
pub struct Sample {
    /// The key.
    pub key: String,
    /// `(field, member position)`, in archive order.
    pub fields: Vec<(String, usize)>,
}

/// The archive's members grouped into samples, in the order of each key's first member. A
/// key whose members are not adjacent, or a field that repeats in one key, is an error:
/// webdataset would read two samples, or refuse.
pub fn group(zip: &ZipIndex) -> Result<Vec<Sample>> {
    let mut samples: Vec<Sample> = Vec::new();
    let mut by_key: HashMap<&str, usize> = HashMap::new();
    for (i, m) in zip.members().iter().enumerate() {
        let Some((key, field)) = split_key(m.name()) else {
            continue;
        };
        match by_key.get(key) {
            Some(&s) if s + 1 == samples.len() => {
                let sample = &mut samples[s];
                if let Some(&(_, other)) = sample.fields.iter().find(|(f, _)| *f == field) {
                    return Err(Error::new(
                        ErrorKind::BadTar,
                        zip.location(),
                        format!(
                            "key {key:?} has field {field:?} twice (members {:?} and {:?})",
                            zip.members()[other].name(),
                            m.name()
                        ),
                    ));
                }
                sample.fields.push((field, i));
            }
            Some(&s) => {
                let first = zip.members()[samples[s].fields[0].1].name();
                return Err(Error::new(
                    ErrorKind::BadTar,
                    zip.location(),
                    format!(
                        "key {key:?} occurs twice: its members {first:?} and {:?} are apart \
                         (a sample's members must follow each other)",
                        m.name()
                    ),
                ));
            }
            None => {
                by_key.insert(key, samples.len());
                samples.push(Sample {
                    key: key.to_string(),
                    fields: vec![(field, i)],
                });
            }
        }
    }
    Ok(samples)
}

/// A keyed archive opened: its samples' reader, their keys, and the samples left out for a
/// missing field (`(key, batch key)`).
pub struct KeyedSet {
    /// The samples.
    pub index: Arc<KeyedIndex>,
    /// Each sample's key.
    pub names: Vec<OsString>,
    /// Samples left out (`skip_missing`): their key and the batch key they lack.
    pub skipped: Vec<(String, String)>,
}

/// The keyed samples of `zip` (a ZIP or tar archive) as `options` say. `shard`: one of many
/// (the fields, when not given, are the first sample's of each shard).
pub fn open(
    zip: Arc<ZipIndex>,
    options: &KeyedOptions,
    threads: Option<usize>,
) -> Result<KeyedSet> {
    let samples = group(&zip)?;
    let fields = match &options.fields {
        Some(f) => f.clone(),
        None => {
            let first = samples.first().ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidArgument,
                    zip.location(),
                    "no member names a key and a field (such as 000123.jpg), so there are no \
                     fields to read; pass fields=",
                )
            })?;
            let mut names: Vec<&String> = first.fields.iter().map(|(f, _)| f).collect();
            names.sort();
            names
                .into_iter()
                .map(|f| FieldSpec {
                    key: f.clone(),
                    names: vec![f.clone()],
                    kind: None,
                })
                .collect()
        }
    };
    if fields.is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            zip.location(),
            "fields is empty",
        ));
    }
    let mut fields = fields;
    let read: Vec<String> = fields.iter().map(|f| f.key.clone()).collect();
    for (key, kind) in &options.kinds {
        let field = fields.iter_mut().find(|f| f.key == *key).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidArgument,
                zip.location(),
                format!(
                    "kinds names {key:?}, which is not a field read ({})",
                    read.join(", ")
                ),
            )
        })?;
        field.kind = Some(*kind);
    }
    let mut kept = Vec::with_capacity(samples.len());
    let mut members: Vec<Vec<usize>> = vec![Vec::with_capacity(samples.len()); fields.len()];
    let mut skipped = Vec::new();
    'samples: for s in &samples {
        let mut found = Vec::with_capacity(fields.len());
        for f in &fields {
            let hit = f
                .names
                .iter()
                .find_map(|n| s.fields.iter().find(|(have, _)| have == n).map(|&(_, i)| i));
            match hit {
                Some(i) => found.push(i),
                None if options.skip_missing => {
                    skipped.push((s.key.clone(), f.key.clone()));
                    continue 'samples;
                }
                None => {
                    let have: Vec<&str> = s.fields.iter().map(|(f, _)| f.as_str()).collect();
                    return Err(Error::new(
                        ErrorKind::Key,
                        zip.location(),
                        format!(
                            "key {:?} has no field {} (it has {}); on_missing=\"skip\" leaves \
                             such samples out",
                            s.key,
                            f.names.join(" or "),
                            have.join(", ")
                        ),
                    ));
                }
            }
        }
        for (k, i) in found.into_iter().enumerate() {
            members[k].push(i);
        }
        kept.push(s.key.clone());
    }
    let errors = ErrorLog::default();
    let mut parts: Vec<Arc<dyn Index>> = Vec::with_capacity(fields.len());
    for (f, chosen) in fields.iter().zip(members) {
        parts.push(part(&zip, f, chosen, options, threads, &errors)?);
    }
    let arrays = fields
        .iter()
        .zip(&parts)
        .map(|(f, p)| ArraySpec {
            name: f.key.clone(),
            ..p.arrays()[0].clone()
        })
        .collect();
    let index = KeyedIndex {
        zip,
        parts,
        arrays,
        len: kept.len(),
        threads,
        errors,
    };
    Ok(KeyedSet {
        index: Arc::new(index),
        names: kept.into_iter().map(OsString::from).collect(),
        skipped,
    })
}

/// The reader of one field: its members, in sample order, read as its kind.
fn part(
    zip: &Arc<ZipIndex>,
    field: &FieldSpec,
    members: Vec<usize>,
    options: &KeyedOptions,
    threads: Option<usize>,
    errors: &ErrorLog,
) -> Result<Arc<dyn Index>> {
    Ok(match field.kind() {
        Kind::Image => {
            let names = members
                .iter()
                .map(|&i| zip.members()[i].name().to_string())
                .collect();
            let images = &options.images;
            let index = ImageIndex::new(
                ImageBytes::Zip {
                    zip: Arc::clone(zip),
                    members,
                },
                names,
                images.spec.clone(),
                images.seed,
                images.skip,
                threads,
            )?
            .logging_to(Arc::clone(errors));
            Arc::new(index)
        }
        Kind::Npy => match members.first() {
            Some(&reference) => Arc::new(ZipSamples::new(
                Arc::clone(zip),
                members,
                SamplePayload::Npy { reference },
                threads,
            )?),
            None => {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    zip.location(),
                    format!(
                        "no sample has field {}: its arrays' dtype and shape are unknown",
                        field.names.join(" or ")
                    ),
                ))
            }
        },
        Kind::NpyRagged => Arc::new(Members::npy_arrays(zip, members, &field.names, threads)?),
        Kind::Int => Arc::new(Members::new(zip, members, None, threads)),
        Kind::Json => Arc::new(Members::new(zip, members, Some(RaggedKind::Json), threads)),
        Kind::Text => Arc::new(Members::new(zip, members, Some(RaggedKind::Utf8), threads)),
        Kind::Bytes => Arc::new(Members::new(zip, members, Some(RaggedKind::Bytes), threads)),
    })
}

fn dtype(descr: &str) -> DType {
    DType::from_descr(Literal::Str(descr.into())).expect("a numpy descr packread writes")
}

/// Longest member an integer label may be.
const MAX_INT_BYTES: u64 = 64;

/// Most bytes one batch of a bytes field may hold.
const MAX_BATCH_BYTES: u64 = 2 << 30;

/// What a field of [`Members`] read whole becomes.
enum Whole {
    /// An integer label written as text, parsed into int64 (after the batch's other reads).
    Ints,
    /// The bytes as they are (bytes, text or JSON: a ragged array).
    Bytes,
    /// `.npy` arrays of the field's dtype, each of its own shape (a ragged array, its batch
    /// holding every sample's shape).
    Arrays(crate::formats::npy::Limits),
}

/// Members read whole, as [`Whole`] says.
struct Members {
    zip: Arc<ZipIndex>,
    members: Vec<usize>,
    whole: Whole,
    arrays: [ArraySpec; 1],
    threads: Option<usize>,
}

/// A ragged array of `dtype` holding `kind`.
fn ragged(kind: RaggedKind, dtype: DType) -> ArraySpec {
    ArraySpec {
        name: String::new(),
        dtype: dtype.clone(),
        shape: vec![],
        ragged: Some(Ragged {
            kind,
            dtype,
            shape: vec![None],
        }),
    }
}

impl Members {
    /// Integer labels (`kind` `None`), or bytes held as `kind`.
    fn new(
        zip: &Arc<ZipIndex>,
        members: Vec<usize>,
        bytes: Option<RaggedKind>,
        threads: Option<usize>,
    ) -> Members {
        let (whole, array) = match bytes {
            None => (Whole::Ints, ArraySpec::fixed("", dtype("<i8"), vec![])),
            Some(kind) => (Whole::Bytes, ragged(kind, dtype("|u1"))),
        };
        Members {
            zip: Arc::clone(zip),
            members,
            whole,
            arrays: [array],
            threads,
        }
    }

    /// `.npy` arrays of the dtype the first member's header declares, of any shapes.
    fn npy_arrays(
        zip: &Arc<ZipIndex>,
        members: Vec<usize>,
        names: &[String],
        threads: Option<usize>,
    ) -> Result<Members> {
        let first = *members.first().ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidArgument,
                zip.location(),
                format!(
                    "no sample has field {}: its arrays' dtype is unknown",
                    names.join(" or ")
                ),
            )
        })?;
        let header = npy_header(zip, first)?;
        Ok(Members {
            zip: Arc::clone(zip),
            members,
            whole: Whole::Arrays(zip.limits().npy),
            arrays: [ragged(RaggedKind::Arrays, header.dtype)],
            threads,
        })
    }

    /// The members of `rows`, read whole one after another (at `offsets`) into `out`, made of
    /// the offsets' last: `Ints` members are refused over [`MAX_INT_BYTES`].
    fn read_whole(
        &self,
        rows: &Rows,
        out: impl FnOnce(Vec<u64>) -> RaggedBatch,
    ) -> Result<RaggedBatch> {
        let chosen: Vec<usize> = rows.as_slice().iter().map(|&r| self.members[r]).collect();
        let max_each = match self.whole {
            Whole::Ints => MAX_INT_BYTES,
            _ => u64::MAX,
        };
        let mut offsets = Vec::with_capacity(chosen.len() + 1);
        offsets.push(0u64);
        let mut extents = Vec::with_capacity(chosen.len());
        for &i in &chosen {
            let size = self.zip.members()[i].size();
            if size > max_each {
                return Err(Error::new(
                    ErrorKind::Decode,
                    self.zip.member_location(i),
                    format!("member is {size} bytes: too long for an integer label"),
                ));
            }
            let at = offsets[offsets.len() - 1];
            check_batch_bytes(&self.zip, at + size)?;
            extents.push(self.zip.extent(i, &Payload::Raw, 0, at as usize)?);
            offsets.push(at + size);
        }
        let mut batch = out(offsets);
        self.zip
            .run(&extents, &chosen, &mut [batch.bytes_mut()], self.threads)?;
        Ok(batch)
    }

    /// Each member's header first (fetched together), then its array, checked against its
    /// own header and the field's dtype, into its place.
    fn read_arrays(&self, rows: &Rows, limits: crate::formats::npy::Limits) -> Result<RaggedBatch> {
        let chosen: Vec<usize> = rows.as_slice().iter().map(|&r| self.members[r]).collect();
        self.zip.prelocate(&chosen, 512);
        let dtype = &self.arrays[0].dtype;
        let item = dtype.itemsize().max(1);
        let mut offsets = Vec::with_capacity(chosen.len() + 1);
        offsets.push(0u64);
        let mut shapes = Vec::with_capacity(chosen.len());
        let mut extents = Vec::with_capacity(chosen.len());
        let mut bytes = 0usize;
        for &i in &chosen {
            let at = |e: Error| e.at(self.zip.member_location(i));
            let header = npy_header(&self.zip, i)?;
            if header.dtype != *dtype {
                return Err(Error::new(
                    ErrorKind::Inconsistent,
                    self.zip.member_location(i),
                    format!(
                        "array is {}, but the field's arrays are {}",
                        header.dtype.descr(),
                        dtype.descr()
                    ),
                ));
            }
            check_batch_bytes(&self.zip, (bytes + header.data_len) as u64)?;
            let expect = Arc::new(NpyExpect {
                dtype: header.dtype.clone(),
                shape: header.shape.clone(),
                limits,
                keep_layout: false,
            });
            let data = self.zip.member_data(i).map_err(at)?;
            let layout = self.zip.npy_layout(i).map_err(at)?;
            let verify = self.zip.limits().verify_crc;
            extents.push(
                data.npy_extent(layout.as_deref(), &expect, verify, 0, bytes, 0)
                    .map_err(at)?,
            );
            bytes += header.data_len;
            offsets.push((bytes / item) as u64);
            shapes.push(header.shape);
        }
        let mut batch = RaggedBatch::zeroed(bytes, offsets, item);
        batch.shapes = shapes;
        self.zip
            .run(&extents, &chosen, &mut [batch.bytes_mut()], self.threads)?;
        Ok(batch)
    }
}

/// Member `i`'s NPY header; a member that is not NPY is an `NpyFormatError` naming it.
fn npy_header(zip: &ZipIndex, i: usize) -> Result<crate::formats::npy::NpyHeader> {
    let at = || zip.member_location(i);
    zip.npy_header(i)
        .map_err(|e| e.at(at()))?
        .ok_or_else(|| Error::new(ErrorKind::NpyFormat, at(), "member is not an NPY array"))
}

/// Refuses a batch of a field growing past [`MAX_BATCH_BYTES`].
fn check_batch_bytes(zip: &ZipIndex, bytes: u64) -> Result<()> {
    if bytes > MAX_BATCH_BYTES {
        return Err(Error::new(
            ErrorKind::LimitExceeded,
            zip.location(),
            "a batch of these members is over 2 GiB; read smaller batches",
        ));
    }
    Ok(())
}

impl Index for Members {
    fn len(&self) -> usize {
        self.members.len()
    }

    fn arrays(&self) -> &[ArraySpec] {
        &self.arrays
    }

    fn location(&self) -> String {
        self.zip.location().to_string()
    }

    fn faults(&self) -> Faults {
        self.zip.faults()
    }

    fn files(&self) -> &dyn Files {
        self.zip.files()
    }

    fn work(&self, rows: usize, _arrays: &[usize]) -> Work {
        match self.whole {
            Whole::Ints => Work::new(rows, rows as u64 * 8),
            _ => Work::new(rows, u64::MAX),
        }
    }

    /// Integer labels are read and parsed after the batch's other reads ([`Index::fill`]); the
    /// other kinds are ragged, never planned.
    fn plan(&self, _rows: &Rows, _arrays: &[usize], plan: &mut Plan) -> Result<()> {
        if !matches!(self.whole, Whole::Ints) {
            return Err(Error::new(
                ErrorKind::Internal,
                self.location(),
                "internal planning error: a ragged field planned as a fixed one",
            ));
        }
        plan.after.push(After::Fill {
            out: 0,
            tag: Tag::new(0, 0),
        });
        Ok(())
    }

    fn fill(&self, rows: &Rows, _tag: Tag, out: &mut [u8]) -> Result<()> {
        let batch = self.read_whole(rows, |offsets| {
            let n = offsets[offsets.len() - 1] as usize;
            RaggedBatch::zeroed(n, offsets, 1)
        })?;
        for (k, pair) in batch.offsets.windows(2).enumerate() {
            let text = &batch.bytes()[pair[0] as usize..pair[1] as usize];
            let value = std::str::from_utf8(text)
                .ok()
                .and_then(|t| t.trim().parse::<i64>().ok())
                .ok_or_else(|| {
                    let i = self.members[rows.as_slice()[k]];
                    Error::new(
                        ErrorKind::Decode,
                        self.zip.member_location(i),
                        format!(
                            "member holds {:?}, not an integer label",
                            String::from_utf8_lossy(text)
                        ),
                    )
                })?;
            out[k * 8..k * 8 + 8].copy_from_slice(&value.to_le_bytes());
        }
        Ok(())
    }

    fn read_ragged(&self, rows: &Rows, _array: usize) -> Result<RaggedBatch> {
        match self.whole {
            Whole::Arrays(limits) => self.read_arrays(rows, limits),
            _ => self.read_whole(rows, |offsets| {
                let n = offsets[offsets.len() - 1] as usize;
                RaggedBatch::zeroed(n, offsets, 1)
            }),
        }
    }

    fn locate(&self, tag: Tag, error: Error) -> Error {
        error.at(self.zip.member_location(tag.at as usize))
    }
}

/// The fields of keyed samples side by side: array `k` is field `k`'s, read by `parts[k]`
/// (each an index of one array over the same archive). A batch plans every part's reads into
/// one plan, so that they run together on the pool.
pub struct KeyedIndex {
    zip: Arc<ZipIndex>,
    parts: Vec<Arc<dyn Index>>,
    arrays: Vec<ArraySpec>,
    len: usize,
    threads: Option<usize>,
    errors: ErrorLog,
}

impl KeyedIndex {
    /// The archive.
    pub fn zip(&self) -> &Arc<ZipIndex> {
        &self.zip
    }

    /// The samples found not to decode (with `skip`), of every image field.
    pub fn error_log(&self) -> ErrorLog {
        Arc::clone(&self.errors)
    }

    fn part_tag(tag: Tag) -> Tag {
        Tag::new(0, tag.at)
    }
}

impl Index for KeyedIndex {
    fn len(&self) -> usize {
        self.len
    }

    fn arrays(&self) -> &[ArraySpec] {
        &self.arrays
    }

    fn location(&self) -> String {
        self.zip.location().to_string()
    }

    fn faults(&self) -> Faults {
        self.zip.faults()
    }

    fn files(&self) -> &dyn Files {
        self.zip.files()
    }

    fn work(&self, rows: usize, arrays: &[usize]) -> Work {
        let mut units = 0usize;
        let mut bytes = 0u64;
        for &a in arrays {
            let w = self.parts[a].work(rows, &[0]);
            units = units.saturating_add(w.units);
            bytes = bytes.saturating_add(w.bytes);
        }
        Work::new(units, bytes)
    }

    fn threads(&self) -> Option<usize> {
        self.threads
    }

    fn plan(&self, rows: &Rows, arrays: &[usize], plan: &mut Plan) -> Result<()> {
        for (out, &a) in arrays.iter().enumerate() {
            let mut own = Plan::default();
            self.parts[a].plan(rows, &[0], &mut own)?;
            if own.files.is_some() {
                return Err(Error::new(
                    ErrorKind::Internal,
                    self.location(),
                    "internal planning error: a field read from staged bytes",
                ));
            }
            let base = plan.extents.len();
            let array = a as u32;
            for (mut e, t) in own.extents.into_iter().zip(own.tags) {
                e.out += out as u32;
                plan.push(e, Tag::new(array, t.at));
            }
            for step in own.after {
                plan.after.push(match step {
                    After::Copy { bytes, pieces, .. } => After::Copy { out, bytes, pieces },
                    After::Keep {
                        extent,
                        len,
                        pieces,
                        key,
                        ..
                    } => After::Keep {
                        extent: base + extent,
                        len,
                        out,
                        pieces,
                        key: Tag::new(array, key.at),
                    },
                    After::Fill { tag, .. } => After::Fill {
                        out,
                        tag: Tag::new(array, tag.at),
                    },
                });
            }
        }
        Ok(())
    }

    fn locate(&self, tag: Tag, error: Error) -> Error {
        match self.parts.get(tag.array as usize) {
            Some(p) => p.locate(Self::part_tag(tag), error),
            None => error,
        }
    }

    fn keep(&self, key: Tag, bytes: Arc<[u8]>) {
        if let Some(p) = self.parts.get(key.array as usize) {
            p.keep(Self::part_tag(key), bytes);
        }
    }

    fn fill(&self, rows: &Rows, tag: Tag, out: &mut [u8]) -> Result<()> {
        match self.parts.get(tag.array as usize) {
            Some(p) => p.fill(rows, Self::part_tag(tag), out),
            None => Err(Error::new(
                ErrorKind::Internal,
                self.location(),
                "internal planning error: a fill of no field",
            )),
        }
    }

    fn read_ragged(&self, rows: &Rows, array: usize) -> Result<RaggedBatch> {
        self.parts[array].read_ragged(rows, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_as_webdataset_splits_them() {
        assert_eq!(split_key("a/b.c.jpg"), Some(("a/b", "c.jpg".to_string())));
        assert_eq!(split_key("000123.JPG"), Some(("000123", "jpg".to_string())));
        assert_eq!(split_key("x.y/z.cls"), Some(("x.y/z", "cls".to_string())));
        assert_eq!(split_key("noext"), None);
        assert_eq!(split_key("dir/.hidden"), None);
        assert_eq!(split_key("__key__"), None);
        assert_eq!(split_key("__meta__/x.json"), None);
        assert_eq!(split_key("__a.b"), Some(("__a", "b".to_string())));
        assert_eq!(Kind::of_field("seg.png"), Kind::Image);
        assert_eq!(Kind::of_field("cls"), Kind::Int);
        assert_eq!(Kind::of_field("tar.gz"), Kind::Bytes);
    }
}
