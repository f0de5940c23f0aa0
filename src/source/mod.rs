//! Where bytes come from. A format holds its file as one `Arc<dyn Source>` and never names a
//! backend: a local file ([`LocalFile`]), bytes in memory ([`Memory`]), an object in object
//! storage ([`crate::remote::RemoteFile`]) or, in the binding, a Python file object. Adding a
//! byte source is one implementation of [`Source`].
//!
//! The engine reads a plan's extents from numbered files ([`Files`]): one source is the only
//! file of [`SingleFile`], a list of sources (a folder of `.npy` files) the files of
//! [`FileList`], numbered in order.

mod file;
mod memory;

use std::any::Any;
use std::io::{self, Read, Seek, SeekFrom};
use std::sync::Arc;

use bytes::Bytes;

use crate::error::{Error, ErrorKind, Result};
pub use file::{open_regular, read_exact_at, read_whole, shown, FileStamp, LocalFile, StampedPath};
pub use memory::Memory;

/// The local file at `path`, opened now, as a source.
pub fn local(path: impl Into<std::path::PathBuf>) -> Result<Arc<dyn Source>> {
    Ok(Arc::new(LocalFile::open(path.into())?))
}

/// `bytes`, named `name` in messages, as a source.
pub fn memory(name: &str, bytes: Vec<u8>) -> Arc<dyn Source> {
    Arc::new(Memory::from_vec(name, bytes))
}

/// How a [`Source`] wants nearby reads merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coalesce {
    /// Two reads of one file at most this many bytes apart are fetched as one, the bytes
    /// between them read and dropped.
    pub gap: u64,
    /// A merged read grows to at most this many bytes (one read longer than this on its own
    /// is still one read).
    pub max_len: u64,
}

/// One file's bytes, wherever they are. Every method but [`read_at`](Source::read_at),
/// [`len`](Source::len) and [`name`](Source::name) has a default that suits a source whose
/// reads are cheap and final (a local file, memory).
pub trait Source: Send + Sync + Any {
    /// Length in bytes (when the source was opened).
    fn len(&self) -> u64;

    /// Whether it holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How messages name it: a path, a URL, `<bytes>`.
    fn name(&self) -> &str;

    /// Fills `buf` from `offset`. Bytes past the end are an error, never zeros.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()>;

    /// Reads several `(offset, len)` ranges, each result in its range's place: one after
    /// another by default; a source whose reads are round trips has them in flight together.
    fn read_ranges(&self, ranges: &[(u64, usize)]) -> Vec<Result<Bytes>> {
        ranges
            .iter()
            .map(|&(offset, len)| {
                let mut buf = vec![0u8; len];
                self.read_at(offset, &mut buf).map(|()| buf.into())
            })
            .collect()
    }

    /// Reads ranges of several sources of this same kind at once (`reads` may name this
    /// source too), each result in its read's place; `None` where the kind has no such read
    /// and each source reads its own (a list of objects fetches all their ranges together).
    fn read_many(&self, _reads: &[(&dyn Source, u64, usize)]) -> Option<Vec<Result<Bytes>>> {
        None
    }

    /// Whether reads wait on a network (object storage): opening such a source is made
    /// interruptible, and a batch reading it never runs inline on the caller's thread.
    fn waits(&self) -> bool {
        false
    }

    /// Whether nearby reads are better fetched as one. `None` (local files, memory): every
    /// extent reads its own bytes, since a `pread` costs a system call and merging would copy
    /// bytes twice. A source whose every read costs a round trip (object storage) says how far
    /// apart two reads may be and how long one merged read may grow.
    fn coalesce(&self) -> Option<Coalesce> {
        None
    }

    /// Reads metadata (what a format parses when it opens): like [`read_at`](Source::read_at)
    /// by default; object storage serves it from cached blocks and the index cache.
    fn read_meta(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.read_at(offset, buf)
    }

    /// Called once a format has read what it needs to open (object storage saves the ranges
    /// it read to the index cache, and lets its blocks go).
    fn opened(&self) {}

    /// What a format parsed from the metadata when this very source was opened before (an
    /// HDF5 dataset's chunk table), by name: object storage keeps it in the index cache;
    /// `None` where nothing is kept.
    fn parsed(&self, _name: &str) -> Option<Bytes> {
        None
    }

    /// Keeps what a format parsed under `name` for the next open (see
    /// [`parsed`](Source::parsed)).
    fn keep_parsed(&self, _name: &str, _bytes: Vec<u8>) {}

    /// The whole content, when it is in memory: a parser may then read it in place.
    fn bytes(&self) -> Option<&[u8]> {
        None
    }

    /// Checks that the source is still what was opened, once a batch has read all it reads:
    /// a file rewritten in place (same inode, same length) would otherwise give another
    /// file's bytes against this one's metadata. `Ok` where nothing can change (memory) or
    /// every read checks already (files opened per read, object storage).
    fn verify(&self) -> Result<()> {
        Ok(())
    }

    /// `otherwise` (an error of a parser or of libhdf5 reading this source), or the error of
    /// the read under it, which says more (a request's URL and status), when one failed.
    fn cause(&self, otherwise: Error) -> Error {
        otherwise
    }

    /// This source as `Any`, for [`read_many`](Source::read_many) to find its own kind.
    fn as_any(&self) -> &dyn Any;
}

/// A source's metadata as a `Read + Seek` stream, for parsers written against one (the ZIP
/// directory reader): reads go through [`Source::read_meta`] in blocks of 64 KiB (a parser
/// reading field by field then costs one read per block), or straight from memory.
pub struct SourceReader<'a> {
    source: &'a dyn Source,
    pos: u64,
    block: Vec<u8>,
    block_at: u64,
}

/// Bytes a [`SourceReader`] reads at once.
const READER_BLOCK: usize = 64 << 10;

impl<'a> SourceReader<'a> {
    /// A stream over `source` from its first byte.
    pub fn new(source: &'a dyn Source) -> SourceReader<'a> {
        SourceReader {
            source,
            pos: 0,
            block: Vec::new(),
            block_at: 0,
        }
    }
}

impl Read for SourceReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let len = self.source.len();
        if self.pos >= len || buf.is_empty() {
            return Ok(0);
        }
        if let Some(all) = self.source.bytes() {
            let at = self.pos as usize;
            let n = buf.len().min(all.len() - at);
            buf[..n].copy_from_slice(&all[at..at + n]);
            self.pos += n as u64;
            return Ok(n);
        }
        let end = self.block_at + self.block.len() as u64;
        if self.pos < self.block_at || self.pos >= end {
            let n = (READER_BLOCK as u64).min(len - self.pos) as usize;
            self.block.resize(n, 0);
            self.source
                .read_meta(self.pos, &mut self.block)
                .map_err(|e| io::Error::other(e.to_string()))?;
            self.block_at = self.pos;
        }
        let at = (self.pos - self.block_at) as usize;
        let n = buf.len().min(self.block.len() - at);
        buf[..n].copy_from_slice(&self.block[at..at + n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for SourceReader<'_> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let pos = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.source.len().checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = pos.ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        Ok(self.pos)
    }
}

/// The files a plan's extents address by number, as the executor reads them.
pub trait Files: Sync {
    /// Fills `buf` from `file` starting at `offset`; a short file is an error.
    fn read_at(&self, file: u32, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// How `file` is named in error messages.
    fn name(&self, file: u32) -> String;
    /// How reads are merged (see [`Source::coalesce`]); the same for every file.
    fn coalesce(&self) -> Option<Coalesce> {
        None
    }
    /// Whether reads wait on a network (see [`Source::waits`]).
    fn waits(&self) -> bool {
        false
    }
    /// Reads several `(file, offset, len)` ranges, each result in its range's place.
    fn read_ranges(&self, ranges: &[(u32, u64, usize)]) -> Vec<Result<Bytes>> {
        ranges
            .iter()
            .map(|&(file, offset, len)| {
                let mut buf = vec![0u8; len];
                self.read_at(file, offset, &mut buf).map(|()| buf.into())
            })
            .collect()
    }
    /// Checks every file is still what was opened (see [`Source::verify`]).
    fn verify(&self) -> Result<()> {
        Ok(())
    }
}

fn no_such_file(file: u32, count: usize) -> Error {
    Error::new(
        ErrorKind::Internal,
        "",
        format!("internal planning error: file {file} of {count}"),
    )
}

/// One source as the only file (number 0) of a plan.
#[derive(Clone)]
pub struct SingleFile(pub Arc<dyn Source>);

impl SingleFile {
    /// The source.
    pub fn source(&self) -> &Arc<dyn Source> {
        &self.0
    }
}

impl Files for SingleFile {
    fn read_at(&self, file: u32, offset: u64, buf: &mut [u8]) -> Result<()> {
        if file != 0 {
            return Err(no_such_file(file, 1));
        }
        self.0.read_at(offset, buf)
    }

    fn name(&self, _file: u32) -> String {
        self.0.name().to_string()
    }

    fn coalesce(&self) -> Option<Coalesce> {
        self.0.coalesce()
    }

    fn waits(&self) -> bool {
        self.0.waits()
    }

    fn read_ranges(&self, ranges: &[(u32, u64, usize)]) -> Vec<Result<Bytes>> {
        if let Some(&(file, _, _)) = ranges.iter().find(|r| r.0 != 0) {
            return ranges.iter().map(|_| Err(no_such_file(file, 1))).collect();
        }
        let plain: Vec<(u64, usize)> = ranges.iter().map(|&(_, o, n)| (o, n)).collect();
        self.0.read_ranges(&plain)
    }

    fn verify(&self) -> Result<()> {
        self.0.verify()
    }
}

/// Sources as the files of a plan, numbered in order (a folder of `.npy` files).
pub struct FileList(Vec<Arc<dyn Source>>);

impl FileList {
    /// `sources`, file `k` being `sources[k]`.
    pub fn new(sources: Vec<Arc<dyn Source>>) -> FileList {
        FileList(sources)
    }

    /// The sources, by file number.
    pub fn sources(&self) -> &[Arc<dyn Source>] {
        &self.0
    }

    fn get(&self, file: u32) -> Result<&Arc<dyn Source>> {
        self.0
            .get(file as usize)
            .ok_or_else(|| no_such_file(file, self.0.len()))
    }
}

impl Files for FileList {
    fn read_at(&self, file: u32, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.get(file)?.read_at(offset, buf)
    }

    fn name(&self, file: u32) -> String {
        self.get(file)
            .map(|s| s.name().to_string())
            .unwrap_or_else(|_| format!("<file {file}>"))
    }

    fn coalesce(&self) -> Option<Coalesce> {
        self.0.first().and_then(|s| s.coalesce())
    }

    fn waits(&self) -> bool {
        self.0.first().is_some_and(|s| s.waits())
    }

    /// The ranges of every file together where the sources' kind reads them so (objects
    /// fetched concurrently), else each file's by its source.
    fn read_ranges(&self, ranges: &[(u32, u64, usize)]) -> Vec<Result<Bytes>> {
        let sources: Result<Vec<&Arc<dyn Source>>> =
            ranges.iter().map(|&(file, _, _)| self.get(file)).collect();
        let sources = match sources {
            Ok(s) => s,
            Err(e) => {
                return ranges
                    .iter()
                    .map(|_| Err(Error::new(e.kind(), e.location(), e.message())))
                    .collect()
            }
        };
        let reads: Vec<(&dyn Source, u64, usize)> = sources
            .iter()
            .zip(ranges)
            .map(|(s, &(_, offset, len))| (&***s, offset, len))
            .collect();
        if let Some(first) = sources.first() {
            if let Some(got) = first.read_many(&reads) {
                return got;
            }
        }
        reads
            .iter()
            .map(|&(s, offset, len)| {
                let mut buf = vec![0u8; len];
                s.read_at(offset, &mut buf).map(|()| buf.into())
            })
            .collect()
    }

    fn verify(&self) -> Result<()> {
        self.0.iter().try_for_each(|s| s.verify())
    }
}
