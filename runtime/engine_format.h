// The kiln engine file format.
//
// Layout (all integers little-endian):
//
//   offset  size  field
//   0       8     magic "KILNENG\0"
//   8       4     format_version (kEngineFormatVersion)
//   12      4     header_bytes (128)
//   16      32    producer, NUL-padded ("kiln 0.1.0")
//   48      8     required_cpu_features (bitmask of CpuFeature)
//   56      8     metadata_offset   |
//   64      8     metadata_size     | metadata section: an EngineMeta protobuf (runtime/engine.proto)
//   72      8     metadata_checksum |
//   80      8     weights_offset    |
//   88      8     weights_size      | weights section: one blob, offset a multiple of 64, each weight
//   96      8     weights_checksum  |  inside it 64-byte aligned; the loader mmaps it (no copy)
//   104     8     file_size
//   112     8     header_checksum (over bytes 0..111)
//   120     8     reserved (0)
//   128           metadata, then padding to 64, then weights
//
// Checksums are kiln::checksum64 (4-lane 64-bit multiply-xor hash) over the section bytes.
// The loader validates, before using anything: size >= 128, magic, version <= supported, header
// checksum, file_size, section bounds and alignment, section checksums, CPU features, then every
// count, index, offset and dtype inside the metadata. Any failure is a one-line error.
//
// Version history:
//   1  (kiln 0.1.0) first format: profiles with plans, shared weights blob, plugin library list.
//   2  kiln's fused ops (FusedMatMul, FusedConv, FusedRotary) are saved in their own domain
//      (kKilnDomain, "ai.kiln") instead of the default ONNX domain. Version-1 files still load:
//      their fused steps have the empty domain, and kernels are found by op type.
//   3  plugin libraries recorded by name, version and file name (the build path only as a hint), so
//      an engine moved with its libraries finds them on the plugin search path; the thread count
//      the tactics were timed at; the config's input generators. The loader reads format 1 and 2
//      files, except those that need a plugin library (recorded by path only): rebuild those.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln {

constexpr char kEngineMagic[8] = {'K', 'I', 'L', 'N', 'E', 'N', 'G', '\0'};
constexpr uint32_t kEngineFormatVersion = 3;
constexpr uint32_t kEngineHeaderBytes = 128;
constexpr size_t kWeightAlignment = 64;
constexpr const char* kProducerVersion = "kiln 0.1.0";

enum CpuFeature : uint64_t {
  kCpuAvx2 = 1u << 0,
  kCpuFma = 1u << 1,
  kCpuAvx512f = 1u << 2,
  kCpuAvx512Bf16 = 1u << 3,
};

struct EngineHeader {
  char magic[8];
  uint32_t format_version;
  uint32_t header_bytes;
  char producer[32];
  uint64_t required_cpu_features;
  uint64_t metadata_offset, metadata_size, metadata_checksum;
  uint64_t weights_offset, weights_size, weights_checksum;
  uint64_t file_size;
  uint64_t header_checksum;
  uint64_t reserved;
};
static_assert(sizeof(EngineHeader) == kEngineHeaderBytes, "engine header must be 128 bytes");

uint64_t checksum64(const void* data, size_t n);
// Features of the CPU we are running on.
uint64_t host_cpu_features();
// "avx2, avx512_bf16" for a bitmask.
std::string cpu_feature_names(uint64_t features);

}  // namespace kiln
