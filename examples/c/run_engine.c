/* run_engine: kiln's C API from a C11 program, built with pkg-config against an installed kiln:
 *
 *   cc -std=c11 run_engine.c $(pkg-config --cflags --libs kiln) -o run_engine
 *   ./run_engine ENGINE PROFILE INPUT_DIR OUTPUT_DIR
 *
 * Reads INPUT_DIR/<input>.npy for every input of PROFILE (little-endian, C order), runs the
 * profile once and writes OUTPUT_DIR/<output>.npy. Errors: kiln's one-line message, exit 1. */
#include <kiln/kiln.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  kiln_dtype dtype;
  int64_t shape[8];
  int rank;
  void *data;
} array;

static const struct { kiln_dtype dtype; const char *descr; } kDescr[] = {
    {KILN_FLOAT32, "<f4"}, {KILN_FLOAT64, "<f8"}, {KILN_FLOAT16, "<f2"}, {KILN_INT8, "|i1"},   {KILN_UINT8, "|u1"},  {KILN_INT16, "<i2"},
    {KILN_UINT16, "<u2"},  {KILN_INT32, "<i4"},   {KILN_UINT32, "<u4"},  {KILN_INT64, "<i8"}, {KILN_UINT64, "<u8"}, {KILN_BOOL, "|b1"}};

static int read_npy(const char *path, array *a) {
  FILE *f = fopen(path, "rb");
  if (!f) return fprintf(stderr, "run_engine: cannot open '%s'\n", path), 0;
  unsigned char pre[10];
  char header[4096];
  if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY\x01", 7) != 0) return fclose(f), fprintf(stderr, "run_engine: '%s' is not a version 1 .npy file\n", path), 0;
  size_t len = (size_t)pre[8] | (size_t)pre[9] << 8;
  if (len >= sizeof header || fread(header, 1, len, f) != len) return fclose(f), fprintf(stderr, "run_engine: '%s' has a bad header\n", path), 0;
  header[len] = '\0';
  const char *descr = strstr(header, "'descr'"), *shape = strstr(header, "'shape'");
  if (!descr || !shape || strstr(header, "'fortran_order': True")) return fclose(f), fprintf(stderr, "run_engine: '%s': unsupported header\n", path), 0;
  descr = strchr(descr + 7, '\'') + 1;
  a->dtype = KILN_UNDEFINED;
  for (size_t i = 0; i < sizeof kDescr / sizeof kDescr[0]; ++i)
    if (strncmp(descr, kDescr[i].descr, 3) == 0) a->dtype = kDescr[i].dtype;
  if (a->dtype == KILN_UNDEFINED) return fclose(f), fprintf(stderr, "run_engine: '%s': unsupported dtype\n", path), 0;
  a->rank = 0;
  size_t count = 1;
  for (const char *p = strchr(shape, '(') + 1; *p && *p != ')';) {
    char *end;
    long long d = strtoll(p, &end, 10);
    if (end == p) { ++p; continue; }
    a->shape[a->rank++] = d;
    count *= (size_t)d;
    p = end;
  }
  size_t bytes = count * kiln_dtype_size(a->dtype);
  a->data = malloc(bytes ? bytes : 1);
  int ok = a->data && fread(a->data, 1, bytes, f) == bytes;
  fclose(f);
  if (!ok) fprintf(stderr, "run_engine: '%s' is truncated\n", path);
  return ok;
}

static int write_npy(const char *path, kiln_dtype dtype, const int64_t *shape, int rank, const void *data) {
  const char *descr = NULL;
  for (size_t i = 0; i < sizeof kDescr / sizeof kDescr[0]; ++i)
    if (kDescr[i].dtype == dtype) descr = kDescr[i].descr;
  if (!descr) return fprintf(stderr, "run_engine: cannot write dtype %d\n", (int)dtype), 0;
  char dims[256] = "", header[512];
  size_t count = 1;
  for (int i = 0; i < rank; ++i) {
    size_t n = strlen(dims);
    snprintf(dims + n, sizeof dims - n, "%lld%s", (long long)shape[i], rank == 1 ? "," : i + 1 < rank ? ", " : "");
    count *= (size_t)shape[i];
  }
  int n = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, dims);
  while ((10 + n + 1) % 64) header[n++] = ' ';
  header[n++] = '\n';
  FILE *f = fopen(path, "wb");
  if (!f) return fprintf(stderr, "run_engine: cannot write '%s'\n", path), 0;
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(n & 0xff), (unsigned char)(n >> 8)};
  size_t bytes = count * kiln_dtype_size(dtype);
  int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(header, 1, (size_t)n, f) == (size_t)n && fwrite(data, 1, bytes, f) == bytes;
  return fclose(f) == 0 && ok;
}

int main(int argc, char **argv) {
  if (argc != 5) return fprintf(stderr, "usage: run_engine ENGINE PROFILE INPUT_DIR OUTPUT_DIR\n"), 2;
  printf("kiln %s\n", kiln_version());
  kiln_engine *engine = NULL;
  kiln_context *ctx = NULL;
  if (kiln_engine_load(argv[1], &engine) != KILN_OK) return fprintf(stderr, "run_engine: %s\n", kiln_last_error()), 1;
  const int profile = kiln_engine_find_profile(engine, argv[2]);
  if (profile < 0) return fprintf(stderr, "run_engine: no profile '%s'\n", argv[2]), 1;
  if (kiln_context_create(engine, argv[2], &ctx) != KILN_OK) return fprintf(stderr, "run_engine: %s\n", kiln_last_error()), 1;

  const int num_inputs = kiln_engine_input_count(engine, profile);
  array *inputs = calloc((size_t)num_inputs, sizeof *inputs);
  char path[4096];
  for (int i = 0; i < num_inputs; ++i) {
    const char *name = kiln_engine_input_name(engine, profile, i);
    snprintf(path, sizeof path, "%s/%s.npy", argv[3], name);
    if (!read_npy(path, &inputs[i])) return 1;
    if (kiln_context_set_input(ctx, name, inputs[i].dtype, inputs[i].shape, inputs[i].rank, inputs[i].data) != KILN_OK)
      return fprintf(stderr, "run_engine: %s\n", kiln_last_error()), 1;
  }
  if (kiln_context_run(ctx) != KILN_OK) return fprintf(stderr, "run_engine: %s\n", kiln_last_error()), 1;

  for (int o = 0; o < kiln_engine_output_count(engine, profile); ++o) {
    const char *name = kiln_engine_output_name(engine, profile, o);
    kiln_dtype dtype;
    const int64_t *shape;
    int rank;
    const void *data;
    if (kiln_context_get_output(ctx, name, &dtype, &shape, &rank, &data) != KILN_OK) return fprintf(stderr, "run_engine: %s\n", kiln_last_error()), 1;
    snprintf(path, sizeof path, "%s/%s.npy", argv[4], name);
    if (!write_npy(path, dtype, shape, rank, data)) return 1;
    printf("output %s: rank %d\n", name, rank);
  }
  for (int i = 0; i < num_inputs; ++i) free(inputs[i].data);
  free(inputs);
  kiln_context_free(ctx);
  kiln_engine_free(engine);
  return 0;
}
