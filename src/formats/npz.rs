//! NPZ: archives of `.npy` members. [`NpzIndex`] reads many NPZ files (one sample each, the
//! same keys) as stacked batches; [`contents`] and [`read_arrays`] load one archive whole, as
//! `numpy.load` does. Both are the ZIP index plus an NPY check per member.

use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwapOption;

use crate::batch::pool::{self, Work};
use crate::batch::{ArraySpec, Extent, Index, Plan, Rows, Tag};
use crate::codec::{Faults, NpyExpect};
use crate::error::{Error, ErrorKind, Result};
use crate::formats::npy::NpyHeader;
use crate::formats::zip::{MemberData, NpyLayout, ZipIndex, ZipLimits, ZIP_FAULTS};
use crate::source::{Files, LocalFile, Source, StampedPath};

/// numpy stores array `k` as member `k.npy`.
const SUFFIX: &str = ".npy";

/// One array of every sample: its key (the member's name without `.npy`) and what its NPY
/// header must say.
#[derive(Debug)]
pub struct NpzKey {
    /// numpy's key (the member's name without `.npy`).
    pub name: String,
    /// What every file's member must hold.
    pub expect: Arc<NpyExpect>,
}

impl NpzKey {
    fn member(&self) -> String {
        format!("{}{SUFFIX}", self.name)
    }
}

/// Where one file's members for every key are, found the first time the file is read, and
/// the file itself, opened for each read and checked against its stamp from then.
struct FileEntry {
    file: StampedPath,
    members: Vec<MemberData>,
    /// Per key: the stored member's header, so that its array is read in place.
    layouts: Vec<Option<Arc<NpyLayout>>>,
}

/// Many NPZ files with the same keys, one sample each: one array per key.
pub struct NpzIndex {
    paths: Vec<PathBuf>,
    keys: Vec<NpzKey>,
    arrays: Vec<ArraySpec>,
    /// Lock-free, so a fork while another thread indexes a file cannot leave a lock behind.
    entries: Vec<ArcSwapOption<FileEntry>>,
    limits: ZipLimits,
    threads: Option<usize>,
}

impl NpzIndex {
    /// Reads the first file's directory and NPY headers: they fix the keys, shapes and dtypes.
    /// Every other file is checked against them when it is first read.
    pub fn open(
        paths: Vec<PathBuf>,
        limits: ZipLimits,
        threads: Option<usize>,
    ) -> Result<NpzIndex> {
        let Some(first) = paths.first() else {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "",
                "NpzReader needs at least one file",
            ));
        };
        let (index, file) = open_archive(first, limits)?;
        let mut keys = Vec::new();
        for (i, m) in index.members().iter().enumerate() {
            let Some(name) = m.name().strip_suffix(SUFFIX) else {
                continue;
            };
            let header = index.npy_header(i)?.ok_or_else(|| {
                Error::new(
                    ErrorKind::NpyFormat,
                    format!("{}:{}", index.location(), m.name()),
                    "member is not an NPY array",
                )
            })?;
            keys.push(NpzKey {
                name: name.to_string(),
                expect: Arc::new(expect(&header, &limits, false)),
            });
        }
        if keys.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                index.location(),
                "archive has no .npy members",
            ));
        }
        let arrays = keys
            .iter()
            .map(|k| ArraySpec {
                name: k.name.clone(),
                dtype: k.expect.dtype.clone(),
                shape: k.expect.shape.clone(),
                ragged: None,
            })
            .collect();
        let set = NpzIndex {
            entries: paths.iter().map(|_| ArcSwapOption::empty()).collect(),
            paths,
            keys,
            arrays,
            limits,
            threads,
        };
        let entry = set.members_of(&index, file)?;
        set.entries[0].store(Some(entry));
        Ok(set)
    }

    /// The keys, in the first file's member order.
    pub fn keys(&self) -> &[NpzKey] {
        &self.keys
    }

    /// The position of key `name` (an array, without `.npy`), or a `KeyError` listing the keys.
    pub fn position(&self, name: &str) -> Result<usize> {
        self.keys
            .iter()
            .position(|k| k.name == name)
            .ok_or_else(|| {
                let known: Vec<&str> = self.keys.iter().map(|k| k.name.as_str()).collect();
                Error::new(
                    ErrorKind::Key,
                    self.paths[0].display().to_string(),
                    format!("no key {name:?} in these files (keys: {known:?})"),
                )
            })
    }

    /// The files, in sample order.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// The file's member table, reading its directory the first time.
    fn entry(&self, file: usize) -> Result<Arc<FileEntry>> {
        if let Some(e) = self.entries[file].load_full() {
            return Ok(e);
        }
        let (index, stamped) = open_archive(&self.paths[file], self.limits)?;
        let entry = self.members_of(&index, stamped)?;
        self.entries[file].store(Some(entry.clone()));
        Ok(entry)
    }

    fn members_of(&self, index: &ZipIndex, file: StampedPath) -> Result<Arc<FileEntry>> {
        let members = self
            .keys
            .iter()
            .map(|k| {
                let member = k.member();
                let i = index.position(&member).map_err(|_| {
                    Error::new(
                        ErrorKind::Key,
                        index.location(),
                        format!("archive has no member {member:?} (key {:?})", k.name),
                    )
                })?;
                Ok((index.member_data(i)?, index.npy_layout(i)?))
            })
            .collect::<Result<Vec<_>>>()?;
        let (members, layouts) = members.into_iter().unzip();
        Ok(Arc::new(FileEntry {
            file,
            members,
            layouts,
        }))
    }
}

/// The archive at `path` opened and its directory read, and the file as later reads open it
/// (checked against its stamp from now: the descriptor is closed once the archive is indexed).
fn open_archive(path: &std::path::Path, limits: ZipLimits) -> Result<(ZipIndex, StampedPath)> {
    let file = LocalFile::open(path.to_path_buf())?;
    let stamped = StampedPath::with_stamp(path.to_path_buf(), file.stamp());
    Ok((ZipIndex::open(Arc::new(file), limits)?, stamped))
}

impl Index for NpzIndex {
    fn len(&self) -> usize {
        self.paths.len()
    }

    fn arrays(&self) -> &[ArraySpec] {
        &self.arrays
    }

    fn location(&self) -> String {
        crate::batch::tiling::location_of(&self.paths)
    }

    fn faults(&self) -> Faults {
        ZIP_FAULTS
    }

    fn files(&self) -> &dyn Files {
        self
    }

    fn work(&self, rows: usize, keys: &[usize]) -> Work {
        let per_row: u64 = keys
            .iter()
            .map(|&k| self.keys[k].expect.data_len() as u64)
            .sum();
        Work::new(
            rows.saturating_mul(keys.len()),
            (rows as u64).saturating_mul(per_row),
        )
    }

    fn threads(&self) -> Option<usize> {
        self.threads
    }

    /// Every file of the batch has its directory read (once, in parallel); then one extent
    /// per key and row.
    fn plan(&self, rows: &Rows, keys: &[usize], plan: &mut Plan) -> Result<()> {
        let rows = rows.as_slice();
        let mut unique = rows.to_vec();
        unique.sort_unstable();
        unique.dedup();
        let entries: Vec<Arc<FileEntry>> = pool::try_map(&unique, |_, &r| self.entry(r))?;
        let entry_of = |r: usize| &entries[unique.binary_search(&r).expect("indexed")];
        for (slot, &k) in keys.iter().enumerate() {
            let key = &self.keys[k];
            let n = key.expect.data_len();
            for (j, &r) in rows.iter().enumerate() {
                let entry = entry_of(r);
                let extent = entry.members[k]
                    .npy_extent(
                        entry.layouts[k].as_deref(),
                        &key.expect,
                        self.limits.verify_crc,
                        slot as u32,
                        j * n,
                        r as u32,
                    )
                    .map_err(|e| self.locate(Tag::new(k as u32, r as u64), e))?;
                plan.push(extent, Tag::new(k as u32, r as u64));
            }
        }
        Ok(())
    }

    /// `(key, file)`: the member's archive and name.
    fn locate(&self, tag: Tag, error: Error) -> Error {
        let (k, r) = (tag.array, tag.at);
        error.at(format!(
            "{}:{}",
            self.paths[r as usize].display(),
            self.keys[k as usize].member()
        ))
    }
}

/// The files of a batch, each checked against the stamp taken when it was indexed (every file
/// a plan reads has been indexed by then).
impl Files for NpzIndex {
    fn read_at(&self, file: u32, offset: u64, buf: &mut [u8]) -> Result<()> {
        let r = file as usize;
        let entry = self.entries[r].load_full().ok_or_else(|| {
            Error::new(
                ErrorKind::Internal,
                "",
                "internal planning error: a file read before it was indexed",
            )
        })?;
        entry.file.read_at(offset, buf)
    }

    fn name(&self, file: u32) -> String {
        self.paths[file as usize].display().to_string()
    }
}

/// What one member of a whole-archive load is.
#[derive(Debug, Clone)]
pub enum Content {
    /// An NPY array: its header and where its data is.
    Array {
        /// numpy's key: the member's name, `.npy` dropped where it ends so.
        key: String,
        /// The member's position in [`ZipIndex::members`].
        member: usize,
        /// The member's NPY header; its `data_offset` counts from the member's first data byte.
        header: NpyHeader,
        /// Where the member's data is in the archive and how it is encoded.
        data: MemberData,
    },
    /// Anything else, returned as bytes (as `numpy.load` does).
    Bytes {
        /// numpy's key: the member's name, `.npy` dropped where it ends so.
        key: String,
        /// The member's position in [`ZipIndex::members`].
        member: usize,
    },
}

impl Content {
    /// Where a whole-archive load may view this array in place in the archive's bytes (which
    /// start at address `base`) instead of copying it: the byte offset of its data, when it is
    /// a stored (not deflated), non-empty array whose data sits at a multiple of `align` (its
    /// dtype's alignment, as numpy computes it). `None`: read it into an array of its own.
    pub fn in_place_offset(&self, base: usize, align: usize) -> Option<usize> {
        let Content::Array { header, data, .. } = self else {
            return None;
        };
        let offset = usize::try_from(data.data_start).ok()? + header.data_offset;
        let count: usize = header.shape.iter().product();
        let viewable = data.is_stored() && count > 0 && header.dtype.itemsize() > 0;
        (viewable && base.checked_add(offset)? % align.max(1) == 0).then_some(offset)
    }
}

fn expect(header: &NpyHeader, limits: &ZipLimits, keep_layout: bool) -> NpyExpect {
    NpyExpect {
        dtype: header.dtype.clone(),
        shape: header.shape.clone(),
        limits: limits.npy,
        keep_layout,
    }
}

/// What loading a whole archive costs (tiny archives load inline, see [`Work`]).
pub fn load_work(index: &ZipIndex) -> Work {
    Work::new(index.len(), index.members().iter().map(|m| m.size()).sum())
}

/// Every member of an archive, in archive order, keyed as numpy keys them (`.npy` dropped).
pub fn contents(index: &ZipIndex) -> Result<Vec<Content>> {
    pool::try_map(index.members(), |i, m| {
        let name = m.name();
        let key = name.strip_suffix(SUFFIX).unwrap_or(name).to_string();
        Ok(match index.npy_header(i)? {
            Some(header) => Content::Array {
                key,
                member: i,
                data: index.member_data(i)?,
                header,
            },
            None => Content::Bytes { key, member: i },
        })
    })
}

/// Checks the CRC-32 of every stored array of an in-memory archive, which is then viewed in
/// place rather than read through the executor (where the check would otherwise happen).
pub fn verify_stored(index: &ZipIndex, contents: &[Content]) -> Result<()> {
    let Some(all) = index.source().bytes() else {
        return Err(Error::new(
            ErrorKind::Internal,
            index.location(),
            "verify_stored is for archives in memory",
        ));
    };
    if !index.limits().verify_crc {
        return Ok(());
    }
    for content in contents {
        if let Content::Array { member, data, .. } = content {
            if data.is_stored() {
                let start = data.data_start as usize;
                let bytes = &all[start..start + data.size as usize];
                if libdeflater::crc32(bytes) != data.crc32 {
                    return Err(Error::new(
                        ErrorKind::BadZip,
                        index.member_location(*member),
                        "CRC-32 mismatch",
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Reads the arrays of `contents` (only `Content::Array` items) into `outs`, one each, in the
/// layout they are stored in (as `numpy.load` returns them).
pub fn read_arrays(index: &ZipIndex, arrays: &[&Content], outs: &mut [&mut [u8]]) -> Result<()> {
    let mut extents: Vec<Extent> = Vec::with_capacity(arrays.len());
    let mut members = Vec::with_capacity(arrays.len());
    for (slot, content) in arrays.iter().enumerate() {
        let Content::Array {
            member,
            header,
            data,
            ..
        } = content
        else {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "",
                "read_arrays takes arrays only",
            ));
        };
        let expect = Arc::new(expect(header, index.limits(), true));
        let layout = index.npy_layout(*member)?;
        let extent = data
            .npy_extent(
                layout.as_deref(),
                &expect,
                index.limits().verify_crc,
                slot as u32,
                0,
                0,
            )
            .map_err(|e| e.at(index.member_location(*member)))?;
        extents.push(extent);
        members.push(*member);
    }
    index.run(&extents, &members, outs, None)
}
