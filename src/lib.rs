//! packread: parallel reads of training data (HDF5 chunks, NPY files, ZIP and NPZ members)
//! straight into preallocated buffers.
//!
//! - [`batch`]: the engine. Every format is an [`batch::Index`] that says where a sample's
//!   bytes are and how they are encoded; one [`batch::read_batch`] plans, reads, decodes and
//!   scatters batches for all of them, on a bounded, fork-aware pool.
//! - [`formats`]: the indexes (NPY, NPZ, ZIP, HDF5).
//! - [`codec`]: the decoders, pure functions from stored bytes to a sample's bytes.
//! - [`open`]: what a reader reads, opened from a path or URL and its options (for one file
//!   and for each shard of many).
//! - [`dtype`]: element types, as numpy describes them.
//! - [`source`]: where bytes come from, one trait object ([`source::Source`]): local files,
//!   memory, and (in [`remote`]) objects in S3, GCS, Azure and HTTP(S), read by merged,
//!   parallel ranged requests.
//!
//! The core has no Python in it; `src/py` (feature `python`) is the binding layer.

// Every `unsafe` operation sits in its own block with a `SAFETY:` comment saying why it holds.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, unreachable_pub)]
#![deny(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]

pub mod batch;
pub mod codec;
pub mod dtype;
pub mod error;
pub mod formats;
pub mod open;
pub mod order;
pub mod remote;
pub mod slab;
pub mod source;
pub mod stats;

#[cfg(feature = "python")]
mod py;

pub use error::{Error, ErrorKind, Result};
