//! Where extents read their bytes from. Every read is a positional `pread`: no shared file
//! cursor, so threads and forked processes never disturb each other.

use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::PathBuf;

use crate::error::{Error, ErrorKind, Result};

/// A set of files the extents of a batch address by number.
pub trait Source: Sync {
    /// Fills `buf` from `file` starting at `offset`; a short file is an error.
    fn read_at(&self, file: u32, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// How `file` is named in error messages.
    fn name(&self, file: u32) -> String;
}

/// What identifies a file's content as the reader saw it: a file replaced (new inode),
/// rewritten (new mtime) or truncated (new length) since no longer matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    pub len: u64,
    dev: u64,
    ino: u64,
    mtime_ns: i128,
}

impl FileStamp {
    pub fn of(meta: &Metadata) -> FileStamp {
        FileStamp {
            len: meta.len(),
            dev: meta.dev(),
            ino: meta.ino(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        }
    }
}

/// Many files, one sample each (a folder of `.npy`, a list of `.npz`). Each read opens the
/// file afresh: holding tens of thousands of descriptors open would exhaust the process limit,
/// and an `open` costs little next to reading a sample. The file's [`FileStamp`] from when the
/// reader parsed it is checked, so a file replaced or rewritten since is an error, not garbage.
pub struct PathSet {
    paths: Vec<PathBuf>,
    stamps: Vec<FileStamp>,
}

impl PathSet {
    pub fn new(paths: Vec<PathBuf>, stamps: Vec<FileStamp>) -> PathSet {
        assert_eq!(paths.len(), stamps.len());
        PathSet { paths, stamps }
    }

    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }
}

impl Source for PathSet {
    fn read_at(&self, file: u32, offset: u64, buf: &mut [u8]) -> Result<()> {
        let i = file as usize;
        let path = &self.paths[i];
        let f = File::open(path).map_err(|e| Error::io(self.name(file), e))?;
        let meta = f.metadata().map_err(|e| Error::io(self.name(file), e))?;
        let was = self.stamps[i];
        if !meta.is_file() || FileStamp::of(&meta) != was {
            let how = if !meta.is_file() {
                "it is no longer a regular file".to_string()
            } else if meta.len() != was.len {
                format!("it was {} bytes, now {}", was.len, meta.len())
            } else {
                "it was replaced or rewritten".to_string()
            };
            return Err(Error::new(
                ErrorKind::Changed,
                self.name(file),
                format!("file changed since the reader opened it ({how}); open a new reader"),
            ));
        }
        read_exact_at(&f, offset, buf).map_err(|e| Error::io(self.name(file), e))
    }

    fn name(&self, file: u32) -> String {
        self.paths[file as usize].display().to_string()
    }
}

/// `pread` until `buf` is full; running into the end of the file is `UnexpectedEof`.
pub fn read_exact_at(f: &File, offset: u64, buf: &mut [u8]) -> io::Result<()> {
    f.read_exact_at(buf, offset).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "file ends before byte {} (it was truncated or replaced)",
                    offset + buf.len() as u64
                ),
            )
        } else {
            e
        }
    })
}
