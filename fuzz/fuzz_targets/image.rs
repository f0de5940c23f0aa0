//! Encoded images through the reader's decode path: the header (`info`, with a pixel limit
//! small enough to keep each input fast), a whole decode in each mode, and the sample
//! transform with an eval crop (crop-decoding its box, or with `draft` a DCT-scaled decode), a
//! random crop (crop-decoding a region of JPEGs) or the whole image at its own size, all into
//! buffers of the declared size. Covers libjpeg-turbo (built with ASan in fuzz builds),
//! `png`, `image-webp`, the EXIF reader and the resampler.
//!
//! Every input is decoded between good images on the same thread: after each input (so also
//! before the next) a good JPEG decoded whole and through an eval crop must give the pixels it
//! gave alone, or the target panics (no libjpeg state, table or error may survive from one
//! image to the next); every 64th input the same for a progressive JPEG, a PNG and a WebP
//! too (their decoders keep nothing between calls, so checking each input would only slow
//! the search down).
//!
//! Input: one byte choosing the mode, crop, draft and EXIF handling; then the encoded image.
#![no_main]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use packread::codec::image::geometry::{
    transform, upright_size, Crop, Draw, Element, ImageSpec, Layout,
};
use packread::codec::image::{decode, info, Limits, Mode};

/// Good images of the seed corpus (make_seeds.py), without the corpus's leading choice byte.
const GOOD: [&[u8]; 4] = [
    include_bytes!("../corpus/image/baseline.jpg"),
    include_bytes!("../corpus/image/progressive.jpg"),
    include_bytes!("../corpus/image/palette.png"),
    include_bytes!("../corpus/image/lossless.webp"),
];

/// What the first `count` good images give: decoded whole, and through a 12x16 eval crop.
fn good_pixels(count: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    let limits = Limits::default();
    GOOD.iter()
        .take(count)
        .map(|raw| {
            let image = &raw[1..];
            let head = info(image, &limits).expect("a good image's header");
            let whole = decode(image, &head, None, Mode::Rgb).expect("a good image").pixels;
            let spec = spec(Crop::Center { resize: 20 }, (16, 12), Mode::Rgb, false, limits);
            let mut crop = vec![0u8; spec.sample_bytes()];
            transform(image, &spec, &mut Draw::new(1, 2, 3), &mut crop).expect("a good crop");
            (whole, crop)
        })
        .collect()
}

fn spec(crop: Crop, size: (u32, u32), mode: Mode, draft: bool, limits: Limits) -> ImageSpec {
    ImageSpec {
        size,
        crop,
        flip: false,
        layout: Layout::Nhwc,
        mode,
        element: Element::U8,
        mean: vec![],
        std: vec![],
        exif_transpose: false,
        draft,
        limits,
    }
}

/// Panics if one of the first `count` good images no longer decodes to what it gave alone.
fn check_good_images(reference: &[(Vec<u8>, Vec<u8>)], count: usize) {
    for (k, got) in good_pixels(count).iter().enumerate() {
        assert!(got == &reference[k], "good image {k} decoded differently after the input");
    }
}

static REFERENCE: OnceLock<Vec<(Vec<u8>, Vec<u8>)>> = OnceLock::new();
static INPUTS: AtomicU64 = AtomicU64::new(0);

fuzz_target!(|data: &[u8]| {
    let reference = REFERENCE.get_or_init(|| good_pixels(GOOD.len()));
    transform_input(data);
    let all = INPUTS.fetch_add(1, Ordering::Relaxed) % 64 == 0;
    check_good_images(reference, if all { GOOD.len() } else { 1 });
});

fn transform_input(data: &[u8]) {
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
    let exif_transpose = choice & 0x80 != 0;
    let (crop, size) = if choice & 0x0C == 0x0C {
        // The whole image at its own size (`size=None`), sized from its header first.
        match upright_size(image, &limits, exif_transpose) {
            Ok(size) => (Crop::Full, size),
            Err(_) => return,
        }
    } else if choice & 0x10 != 0 {
        let crop = Crop::Random {
            scale: (0.08, 1.0),
            ratio: (0.75, 4.0 / 3.0),
        };
        (crop, (16, 12))
    } else {
        (Crop::Center { resize: 20 }, (16, 12))
    };
    let spec = ImageSpec {
        size,
        crop,
        flip: choice & 0x20 != 0,
        layout: if choice & 0x40 != 0 { Layout::Nchw } else { Layout::Nhwc },
        mode,
        element: Element::U8,
        mean: vec![],
        std: vec![],
        exif_transpose,
        draft: choice & 0x08 != 0,
        limits,
    };
    let mut out = vec![0u8; spec.sample_bytes()];
    let _ = transform(image, &spec, &mut Draw::new(1, 2, 3), &mut out);
}
