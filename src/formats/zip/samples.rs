//! Members of an archive as samples ([`ZipSamples`]): a selection of members (by pattern,
//! names or all), each one sample of one array, raw bytes viewed as a dtype and shape, or a
//! `.npy` array whose header must agree with a reference member's.

use std::sync::Arc;

use super::{Payload, ZipIndex};
use crate::batch::pool::{self, Work};
use crate::batch::{ArraySpec, Index, Plan, Rows, Tag};
use crate::codec::{Faults, NpyExpect};
use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};
use crate::formats::npy::ARRAY_NAME;
use crate::source::Files;

/// What each selected member holds.
#[derive(Debug, Clone)]
pub enum SamplePayload {
    /// Raw bytes, viewed as `dtype` in `shape` (every member must be exactly that size).
    Raw {
        /// Element type.
        dtype: DType,
        /// Shape of one member's array.
        shape: Vec<usize>,
    },
    /// `.npy` members, each checked against the header of the member at `reference` (a
    /// position in the archive).
    Npy {
        /// The member whose header every member must repeat.
        reference: usize,
    },
}

/// Members of one archive read as samples: sample `k` is member `members[k]`.
pub struct ZipSamples {
    index: Arc<ZipIndex>,
    members: Vec<usize>,
    /// `.npy` members: what each must hold (the reference member's header).
    npy: Option<Arc<NpyExpect>>,
    arrays: [ArraySpec; 1],
    threads: Option<usize>,
}

impl ZipSamples {
    /// The members at `members` of `index` (positions, in sample order) as samples holding
    /// `payload`; a `.npy` payload takes its dtype and shape from the reference's header.
    pub fn new(
        index: Arc<ZipIndex>,
        members: Vec<usize>,
        payload: SamplePayload,
        threads: Option<usize>,
    ) -> Result<ZipSamples> {
        let reference = match payload {
            SamplePayload::Npy { reference } => Some(reference),
            SamplePayload::Raw { .. } => None,
        };
        if let Some(&bad) = members
            .iter()
            .chain(&reference)
            .find(|&&m| m >= index.len())
        {
            return Err(Error::new(
                ErrorKind::Internal,
                index.location(),
                format!("member {bad} of {}", index.len()),
            ));
        }
        let (dtype, shape, npy) = match payload {
            SamplePayload::Raw { dtype, shape } => (dtype, shape, None),
            SamplePayload::Npy { reference } => {
                let header = index.npy_header(reference)?.ok_or_else(|| {
                    Error::new(
                        ErrorKind::NpyFormat,
                        index.member_location(reference),
                        "member is not an NPY array",
                    )
                })?;
                let expect = NpyExpect {
                    dtype: header.dtype.clone(),
                    shape: header.shape.clone(),
                    limits: index.limits().npy,
                    keep_layout: false,
                };
                (header.dtype, header.shape, Some(Arc::new(expect)))
            }
        };
        Ok(ZipSamples {
            index,
            members,
            npy,
            arrays: [ArraySpec {
                name: ARRAY_NAME.to_string(),
                dtype,
                shape,
                ragged: None,
            }],
            threads,
        })
    }

    /// The archive.
    pub fn zip(&self) -> &Arc<ZipIndex> {
        &self.index
    }

    /// The selected members' positions in the archive, in sample order.
    pub fn members(&self) -> &[usize] {
        &self.members
    }
}

impl Index for ZipSamples {
    fn len(&self) -> usize {
        self.members.len()
    }

    fn arrays(&self) -> &[ArraySpec] {
        &self.arrays
    }

    fn location(&self) -> String {
        self.index.location().to_string()
    }

    fn faults(&self) -> Faults {
        self.index.faults()
    }

    fn files(&self) -> &dyn Files {
        self.index.files()
    }

    fn work(&self, rows: usize, _arrays: &[usize]) -> Work {
        Work::new(
            rows,
            (rows as u64).saturating_mul(self.arrays[0].sample_bytes() as u64),
        )
    }

    fn threads(&self) -> Option<usize> {
        self.threads
    }

    /// The members' local headers are read (in parallel) the first time; then one extent per
    /// row.
    fn plan(&self, rows: &Rows, _arrays: &[usize], plan: &mut Plan) -> Result<()> {
        let n = self.arrays[0].sample_bytes();
        let members: Vec<usize> = rows.as_slice().iter().map(|&r| self.members[r]).collect();
        // A `.npy` member's header (~128 bytes) comes with its local header.
        self.index
            .prelocate(&members, if self.npy.is_some() { 512 } else { 0 });
        let extents = pool::try_map(rows.as_slice(), |k, &row| {
            let i = self.members[row];
            let located = |e: Error| self.locate(Tag::new(0, i as u64), e);
            match &self.npy {
                Some(expect) => {
                    let data = self.index.member_data(i).map_err(located)?;
                    let layout = self.index.npy_layout(i).map_err(located)?;
                    let verify = self.index.limits().verify_crc;
                    data.npy_extent(layout.as_deref(), expect, verify, 0, k * n, 0)
                        .map_err(located)
                }
                None => {
                    // The member's own faults (limits, encryption, a damaged header) first.
                    self.index.member_data(i).map_err(located)?;
                    let size = self.index.members()[i].size();
                    if size != n as u64 {
                        return Err(Error::new(
                            ErrorKind::Inconsistent,
                            self.index.member_location(i),
                            format!("member is {size} bytes, but the dtype and shape need {n}"),
                        ));
                    }
                    self.index
                        .extent(i, &Payload::Raw, 0, k * n)
                        .map_err(located)
                }
            }
        })?;
        for (extent, &row) in extents.into_iter().zip(rows.as_slice()) {
            plan.push(extent, Tag::new(0, self.members[row] as u64));
        }
        Ok(())
    }

    /// `(0, member)`: the archive and the member's name.
    fn locate(&self, tag: Tag, error: Error) -> Error {
        let member = tag.at;
        error.at(self.index.member_location(member as usize))
    }
}
