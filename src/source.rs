//! Where extents read their bytes from. Every read is a positional `pread`: no shared file
//! cursor, so threads and forked processes never disturb each other.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use crate::error::{Error, ErrorKind, Result};

/// A set of files the extents of a batch address by number.
pub trait Source: Sync {
    /// Fills `buf` from `file` starting at `offset`; a short file is an error.
    fn read_at(&self, file: u32, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// How `file` is named in error messages.
    fn name(&self, file: u32) -> String;
}

/// Many files, one sample each (a folder of `.npy`, a list of `.npz`). Each read opens the
/// file afresh: holding tens of thousands of descriptors open would exhaust the process limit,
/// and an `open` costs little next to reading a sample. The length recorded when the reader
/// opened the file is checked, so a file replaced or truncated since is an error, not garbage.
pub struct PathSet {
    paths: Vec<PathBuf>,
    lens: Vec<u64>,
}

impl PathSet {
    pub fn new(paths: Vec<PathBuf>, lens: Vec<u64>) -> PathSet {
        assert_eq!(paths.len(), lens.len());
        PathSet { paths, lens }
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
        if !meta.is_file() || meta.len() != self.lens[i] {
            return Err(Error::new(
                ErrorKind::Changed,
                self.name(file),
                format!(
                    "file changed since the reader opened it (was a {}-byte file, now {} bytes{})",
                    self.lens[i],
                    meta.len(),
                    if meta.is_file() {
                        ""
                    } else {
                        ", not a regular file"
                    }
                ),
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
