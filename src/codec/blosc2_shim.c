/* packread's glue to c-blosc2 (built by build.rs). Decoding hands c-blosc2 one chunk at a time,
 * whose header packread has already checked (src/codec/blosc.rs), into a buffer of exactly the
 * size that header declares. c-blosc2's frame and b2nd readers are not used for decoding: they
 * trust the frame's metalayers and offsets (a b2nd rank past 8 overflows a stack array, a zero
 * chunk dimension divides by zero), so frames are parsed in Rust (src/codec/blosc2_frame.rs).
 *
 * Every call uses a context of its own with one thread, so calls from several threads never
 * share state. The encoders are for tests, benchmarks and fuzz seeds only. */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "b2nd.h"
#include "blosc2.h"

void packread_blosc2_init(void) { blosc2_init(); }

/* Decodes the blosc chunk `src` (`srclen` bytes) into `dst` (`dstlen` bytes). Returns the
 * decoded size, or a negative c-blosc2 error code. The context is made for this chunk alone:
 * c-blosc2 2.15 keeps a freed zstd dictionary in a context reused after a chunk that carried
 * one (a use after free the hdf5_chunk fuzz target found when contexts were kept per thread;
 * its input is in the seed corpus). */
int packread_blosc_chunk_decode(const uint8_t *src, int32_t srclen, uint8_t *dst,
                                int32_t dstlen) {
  blosc2_dparams dparams = BLOSC2_DPARAMS_DEFAULTS;
  dparams.nthreads = 1;
  blosc2_context *dctx = blosc2_create_dctx(dparams);
  if (dctx == NULL) {
    return BLOSC2_ERROR_MEMORY_ALLOC;
  }
  int n = blosc2_decompress_ctx(dctx, src, srclen, dst, dstlen);
  blosc2_free_ctx(dctx);
  return n;
}

static blosc2_cparams cparams_for(int32_t typesize, int clevel, int doshuffle,
                                  const char *compname, int *ok) {
  blosc2_cparams cparams = BLOSC2_CPARAMS_DEFAULTS;
  cparams.typesize = typesize;
  cparams.clevel = clevel;
  cparams.filters[BLOSC2_MAX_FILTERS - 1] = (uint8_t)doshuffle;
  cparams.nthreads = 1;
  int code = blosc2_compname_to_compcode(compname);
  *ok = code >= 0;
  cparams.compcode = (uint8_t)(code < 0 ? 0 : code);
  return cparams;
}

/* A malloc'ed copy of `n` bytes at `p` in `*out`; returns `n`, or an error code. */
static int64_t copy_out(const uint8_t *p, int64_t n, uint8_t **out) {
  uint8_t *copy = malloc((size_t)n);
  if (copy == NULL) {
    return BLOSC2_ERROR_MEMORY_ALLOC;
  }
  memcpy(copy, p, (size_t)n);
  *out = copy;
  return n;
}

/* For tests and benchmarks: compresses `src` into one blosc chunk (c-blosc2's own format)
 * with codec `compname` (and, with `use_dict`, a zstd dictionary trained on its blocks and
 * stored in the chunk), or, with `frame` set, into a contiguous frame holding that one chunk
 * (what the HDF5 blosc2 filter writes for a 1-d chunk). Returns the bytes written to `*out`
 * (malloc'ed; the caller frees it with packread_blosc2_free), or a negative code. */
int64_t packread_blosc2_compress(const uint8_t *src, int32_t srclen, int32_t typesize,
                                 int clevel, int doshuffle, const char *compname, int frame,
                                 int use_dict, uint8_t **out) {
  *out = NULL;
  int ok = 0;
  blosc2_cparams cparams = cparams_for(typesize, clevel, doshuffle, compname, &ok);
  if (!ok) {
    return BLOSC2_ERROR_CODEC_SUPPORT;
  }
  cparams.use_dict = use_dict;
  if (!frame) {
    int32_t cap = srclen + BLOSC2_MAX_OVERHEAD;
    uint8_t *buf = malloc((size_t)cap);
    blosc2_context *cctx = blosc2_create_cctx(cparams);
    if (buf == NULL || cctx == NULL) {
      free(buf);
      if (cctx != NULL) {
        blosc2_free_ctx(cctx);
      }
      return BLOSC2_ERROR_MEMORY_ALLOC;
    }
    int n = blosc2_compress_ctx(cctx, src, srclen, buf, cap);
    blosc2_free_ctx(cctx);
    if (n <= 0) {
      free(buf);
      return n < 0 ? n : BLOSC2_ERROR_FAILURE;
    }
    *out = buf;
    return n;
  }
  blosc2_storage storage = {.cparams = &cparams, .contiguous = false};
  blosc2_schunk *sc = blosc2_schunk_new(&storage);
  if (sc == NULL) {
    return BLOSC2_ERROR_FAILURE;
  }
  int64_t n = blosc2_schunk_append_buffer(sc, src, srclen);
  if (n >= 0) {
    uint8_t *view = NULL;
    bool needs_free = false;
    n = blosc2_schunk_to_buffer(sc, &view, &needs_free);
    if (n >= 0 && !needs_free) {
      n = copy_out(view, n, out); /* a view into the super-chunk: copy it out first */
    } else if (n >= 0) {
      *out = view;
    }
  }
  blosc2_schunk_free(sc);
  return n;
}

/* For tests and fuzz seeds: `src` (an array of `shape`, C order) as a contiguous frame holding
 * a b2nd array with the given chunk and block shapes, as hdf5plugin and PyTables write n-d
 * chunks. Returns the frame's size (in `*out`, freed with packread_blosc2_free) or a negative
 * code. */
int64_t packread_b2nd_compress(const uint8_t *src, int64_t srclen, int32_t typesize,
                               int doshuffle, const char *compname, int8_t ndim,
                               const int64_t *shape, const int32_t *chunkshape,
                               const int32_t *blockshape, uint8_t **out) {
  *out = NULL;
  int ok = 0;
  blosc2_cparams cparams = cparams_for(typesize, 5, doshuffle, compname, &ok);
  if (!ok) {
    return BLOSC2_ERROR_CODEC_SUPPORT;
  }
  blosc2_storage storage = {.cparams = &cparams, .contiguous = true};
  b2nd_context_t *ctx =
      b2nd_create_ctx(&storage, ndim, shape, chunkshape, blockshape, NULL, 0, NULL, 0);
  if (ctx == NULL) {
    return BLOSC2_ERROR_FAILURE;
  }
  b2nd_array_t *array = NULL;
  int64_t n = b2nd_from_cbuffer(ctx, &array, src, srclen);
  if (n >= 0) {
    uint8_t *frame = NULL;
    int64_t len = 0;
    bool needs_free = false;
    n = b2nd_to_cframe(array, &frame, &len, &needs_free);
    if (n >= 0) {
      n = needs_free ? (*out = frame, len) : copy_out(frame, len, out);
    }
    b2nd_free(array);
  }
  b2nd_free_ctx(ctx);
  return n;
}

void packread_blosc2_free(uint8_t *p) { free(p); }
