//! Decode pipelines: pure functions from stored bytes to the bytes a sample holds in C order.
//! Every format describes its encoding as a [`Pipeline`]; the executor runs it.

mod transpose;

use std::sync::Arc;

pub use transpose::fortran_to_c;

/// One decoding step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Reorders an array stored in Fortran order (NPY `fortran_order: True`) into C order.
    FortranToC {
        shape: Arc<[usize]>,
        itemsize: usize,
    },
}

impl Step {
    /// Bytes this step produces from `input_len` bytes, given the pipeline's final length.
    fn output_len(&self, _input_len: usize, final_len: usize) -> usize {
        match self {
            Step::FortranToC { .. } => final_len,
        }
    }

    fn apply(&self, input: &[u8], out: &mut [u8]) -> Result<(), String> {
        match self {
            Step::FortranToC { shape, itemsize } => fortran_to_c(input, out, shape, *itemsize),
        }
    }
}

/// Steps applied in order to the stored bytes. Cheap to clone (shared).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pipeline {
    steps: Option<Arc<[Step]>>,
}

impl Pipeline {
    /// Stored bytes are the sample's bytes.
    pub fn identity() -> Pipeline {
        Pipeline { steps: None }
    }

    pub fn new(steps: Vec<Step>) -> Pipeline {
        if steps.is_empty() {
            Pipeline::identity()
        } else {
            Pipeline {
                steps: Some(steps.into()),
            }
        }
    }

    pub fn fortran_to_c(shape: &[usize], itemsize: usize) -> Pipeline {
        Pipeline::new(vec![Step::FortranToC {
            shape: shape.into(),
            itemsize,
        }])
    }

    pub fn is_identity(&self) -> bool {
        self.steps.is_none()
    }

    pub fn steps(&self) -> &[Step] {
        self.steps.as_deref().unwrap_or(&[])
    }

    /// Decodes `input` into `out`, which must be exactly the decoded length. `tmp` is scratch
    /// space for intermediate results, reused across calls.
    pub fn decode(
        &self,
        input: &[u8],
        out: &mut [u8],
        tmp: &mut [Vec<u8>; 2],
    ) -> Result<(), String> {
        let steps = self.steps();
        let Some((last, rest)) = steps.split_last() else {
            if input.len() != out.len() {
                return Err(format!(
                    "expected {} bytes, found {}",
                    out.len(),
                    input.len()
                ));
            }
            out.copy_from_slice(input);
            return Ok(());
        };
        // Intermediate results alternate between the two scratch buffers.
        let [a, b] = tmp;
        let mut held: Option<bool> = None; // None: still `input`; Some(false): `a`; Some(true): `b`
        let mut len = input.len();
        for step in rest {
            let next = step.output_len(len, out.len());
            let (dst, src): (&mut Vec<u8>, &[u8]) = match held {
                None => (&mut *a, input),
                Some(false) => (&mut *b, &a[..len]),
                Some(true) => (&mut *a, &b[..len]),
            };
            if dst.len() < next {
                dst.resize(next, 0);
            }
            step.apply(src, &mut dst[..next])?;
            held = Some(matches!(held, Some(false)));
            len = next;
        }
        let current: &[u8] = match held {
            None => input,
            Some(false) => &a[..len],
            Some(true) => &b[..len],
        };
        last.apply(current, out)
    }
}
