// The flavor catalog: the named machine shapes a job asks for (`--flavor h100-1-gpu --gpu 2`), what
// one unit of each holds, its price, and whether this installation can run it.
//
// A catalog is a JSON document (docs/formats/flavors.md); `sovai server --flavors FILE` replaces
// the built-in default, which uses the reference cloud's names:
//
//   {"flavors": [{"id": "h100-1-gpu", "kind": "gpu", "gpu_model": "H100", "description": "...",
//                 "gpus_per_unit": 1, "vcpus_per_unit": 30, "memory_gib_per_unit": 200,
//                 "max_units": 4, "price_per_minute_eur": "0.0467"}, ...]}
//
// Prices are decimal strings in EUR per unit-minute, held as micro-euros so that billing adds
// integers (a float would drift over millions of minutes).
// Thread-safety: values; a FlavorCatalog is immutable after parsing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace sovai::control {

enum class FlavorKind : uint8_t { kCpu, kGpu };

struct Flavor {
  std::string id;  // "h100-1-gpu"
  FlavorKind kind = FlavorKind::kCpu;
  // For GPU flavors: matched case-insensitively as a word of the GPU's name ("H100" matches
  // "NVIDIA H100 80GB HBM3"; "V100S" does not match "V100").
  std::string gpu_model;
  std::string description;
  int gpus_per_unit = 0;
  int vcpus_per_unit = 1;
  uint64_t memory_bytes_per_unit = 0;
  int max_units = 1;
  int64_t price_micro_eur_per_minute = 0;  // per unit
};

class FlavorCatalog {
 public:
  // Parses and validates a catalog: unique ids ([a-z0-9-], at most kMaxFlavorIdBytes), known
  // kinds, GPU flavors with a model and gpus_per_unit >= 1, CPU flavors without GPUs, positive
  // vCPUs, memory and max_units, prices as non-negative decimals with at most 6 decimals.
  // Errors name the flavor (by index when it has no id yet) and the field.
  static base::Result<FlavorCatalog> Parse(std::string_view json);
  // The built-in catalog (the reference cloud's flavor names).
  static const FlavorCatalog& Default();
  static std::string_view DefaultJson();

  const std::vector<Flavor>& flavors() const { return flavors_; }
  // NotFound naming the known ids when `id` is not in the catalog.
  base::Result<const Flavor*> Find(std::string_view id) const;

 private:
  std::vector<Flavor> flavors_;
};

// Parses "0.0467" (EUR) into micro-euros (46700). InvalidArgument for anything but a
// non-negative decimal with at most 6 fractional digits and at most 9 integer digits.
base::Result<int64_t> ParseMicroEur(std::string_view decimal);
// Formats micro-euros as a decimal with the fraction trimmed to what is needed ("0.0467", "1").
std::string FormatMicroEur(int64_t micro_eur);

// What a job asks of the machine: `units` of a flavor.
struct ResourceRequest {
  int gpus = 0;
  int cpus = 0;
  uint64_t memory_bytes = 0;
  std::string gpu_model;  // empty for CPU flavors
};

// The resources of `units` units of `flavor`. InvalidArgument when units is outside
// [1, max_units], with a message naming the flavor's maximum.
base::Result<ResourceRequest> RequestFor(const Flavor& flavor, int units);

// Whether a GPU named `gpu_name` (as nvidia-smi reports it) is of `model`: `model` appears in
// the name as a whole word, case-insensitively.
bool GpuMatchesModel(std::string_view gpu_name, std::string_view model);

}  // namespace sovai::control
