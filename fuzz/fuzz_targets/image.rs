//! Encoded images through the reader's decode path: the header (`info`, with a pixel limit
//! small enough to keep each input fast), a whole decode in each mode, and the sample
//! transform with an eval and a random crop (crop-decoding a region of JPEGs), all into
//! buffers of the declared size. Covers libjpeg-turbo (built with ASan in fuzz builds),
//! `png`, `image-webp`, the EXIF reader and the resampler.
//!
//! Input: one byte choosing the mode, crop and EXIF handling; then the encoded image.
#![no_main]

use libfuzzer_sys::fuzz_target;
use packread::codec::image::geometry::{transform, Crop, Draw, Element, ImageSpec, Layout};
use packread::codec::image::{decode, info, Limits, Mode};

fuzz_target!(|data: &[u8]| {
    let Some((&choice, image)) = data.split_first() else {
        return;
    };
    let limits = Limits {
        max_pixels: 1 << 20,
    };
    let mode = [Mode::Rgb, Mode::L, Mode::Rgba][usize::from(choice % 3)];
    if let Ok(head) = info(image, &limits) {
        let _ = decode(image, &head, None, mode);
    }
    let crop = if choice & 0x10 != 0 {
        Crop::Random {
            scale: (0.08, 1.0),
            ratio: (0.75, 4.0 / 3.0),
        }
    } else {
        Crop::Center { resize: 20 }
    };
    let spec = ImageSpec {
        size: (16, 12),
        crop,
        flip: choice & 0x20 != 0,
        layout: if choice & 0x40 != 0 { Layout::Nchw } else { Layout::Nhwc },
        mode,
        element: Element::U8,
        mean: vec![],
        std: vec![],
        exif_transpose: choice & 0x80 != 0,
        limits,
    };
    let mut out = vec![0u8; spec.sample_bytes()];
    let _ = transform(image, &spec, &mut Draw::new(1, 2, 3), &mut out);
});
