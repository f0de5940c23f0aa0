/* packread's glue to c-blosc2 (built by build.rs). Decoding hands c-blosc2 one chunk at a time,
 * whose header packread has already checked (src/codec/blosc.rs), into a buffer of exactly the
 * size that header declares. c-blosc2's frame and b2nd readers are not used for decoding: they
 * trust the frame's metalayers and offsets (a b2nd rank past 8 overflows a stack array, a zero
 * chunk dimension divides by zero), so frames are parsed in Rust (src/codec/blosc2_frame.rs).
 *
 * Each thread keeps a decompression context of its own with one thread (a chunk with a zstd
 * dictionary gets a fresh one), so calls from several threads never share state. The encoders
 * are for tests, benchmarks and fuzz seeds only. */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "b2nd.h"
#include "blosc2.h"
#include "context.h" /* c-blosc2's own, pinned: a kept context's thread count is set here */

void packread_blosc2_init(void) { blosc2_init(); }

/* A thread's decompression context, kept from chunk to chunk, and the block and type sizes
 * it last decoded. */
typedef struct {
  blosc2_context *ctx;
  int32_t blocksize;
  uint8_t typesize;
} packread_dctx;

/* A one-thread decompression context. BLOSC_NTHREADS in the environment would give it a pool
 * of threads: a context kept across a fork would then wait on threads the child does not
 * have, and packread's own pool already decodes chunks in parallel. */
static blosc2_context *new_dctx(void) {
  blosc2_dparams dparams = BLOSC2_DPARAMS_DEFAULTS;
  dparams.nthreads = 1;
  blosc2_context *dctx = blosc2_create_dctx(dparams);
  if (dctx != NULL) {
    dctx->nthreads = 1;
    dctx->new_nthreads = 1;
  }
  return dctx;
}

/* Frees a kept context (at its thread's exit). */
void packread_blosc_dctx_free(packread_dctx *kept) {
  if (kept != NULL) {
    if (kept->ctx != NULL) {
      blosc2_free_ctx(kept->ctx);
    }
    free(kept);
  }
}

/* Decodes the blosc chunk `src` (`srclen` bytes, at least the 16-byte header: checked by the
 * caller) into `dst` (`dstlen` bytes). Returns the decoded size, or a negative c-blosc2 error
 * code.
 *
 * A chunk that carries a zstd dictionary (the dictionary bit of byte 31 in an extended header,
 * the one both shuffle bits of the flags mark: c-blosc2's own test, read the same way here) is
 * decoded in a context made for it alone: c-blosc2 2.15 frees a context's dictionary when the
 * next chunk brings one, but never clears `use_dict`, so a reused context would decode later chunks
 * with a freed dictionary (the use after free the hdf5_chunk fuzz target found when contexts
 * were kept per thread; its input is in the seed corpus).
 *
 * Every other chunk is decoded in `*kept`, the calling thread's context: made on first use,
 * and made again when the block or type size changes (c-blosc2 sizes a context's scratch by
 * both and regrows it for a larger block only) or after a decode fails (nothing a failed
 * chunk left behind is used again). Making a context per chunk cost a fresh scratch of four
 * blocks (often mapped and unmapped by malloc, page faults included) and, for zstd, a fresh
 * decoder per chunk. */
int packread_blosc_chunk_decode(const uint8_t *src, int32_t srclen, uint8_t *dst,
                                int32_t dstlen, packread_dctx **kept) {
  uint8_t extended = BLOSC_DOSHUFFLE | BLOSC_DOBITSHUFFLE;
  int dict = srclen >= BLOSC_EXTENDED_HEADER_LENGTH && (src[2] & extended) == extended &&
             (src[31] & BLOSC2_USEDICT);
  if (dict || kept == NULL) {
    blosc2_context *dctx = new_dctx();
    if (dctx == NULL) {
      return BLOSC2_ERROR_MEMORY_ALLOC;
    }
    int n = blosc2_decompress_ctx(dctx, src, srclen, dst, dstlen);
    blosc2_free_ctx(dctx);
    return n;
  }
  int32_t blocksize = (int32_t)((uint32_t)src[8] | (uint32_t)src[9] << 8 |
                                (uint32_t)src[10] << 16 | (uint32_t)src[11] << 24);
  uint8_t typesize = src[3];
  packread_dctx *k = *kept;
  if (k != NULL && (k->blocksize != blocksize || k->typesize != typesize)) {
    packread_blosc_dctx_free(k);
    *kept = k = NULL;
  }
  if (k == NULL) {
    k = malloc(sizeof *k);
    if (k == NULL) {
      return BLOSC2_ERROR_MEMORY_ALLOC;
    }
    k->ctx = new_dctx();
    if (k->ctx == NULL) {
      free(k);
      return BLOSC2_ERROR_MEMORY_ALLOC;
    }
    k->blocksize = blocksize;
    k->typesize = typesize;
    *kept = k; /* a kept context always has its c-blosc2 context */
  }
  int n = blosc2_decompress_ctx(k->ctx, src, srclen, dst, dstlen);
  if (n != dstlen) {
    packread_blosc_dctx_free(k);
    *kept = NULL;
  }
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
