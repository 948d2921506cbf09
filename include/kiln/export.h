// KILN_API marks what libkiln_runtime.so (and libkiln_builder.so) export. kiln is compiled with
// -fvisibility=hidden, so everything else (plans, kernels, the engine format's protobuf, the plugin
// host) stays private to the library and may change between releases. The attribute means the same
// thing to the library and to its users (ELF), so the header needs no "building kiln" switch.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define KILN_API __attribute__((visibility("default")))
#else
#define KILN_API
#endif
