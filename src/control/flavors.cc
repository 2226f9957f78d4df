#include "control/flavors.h"

#include <cctype>
#include <set>

#include "base/json.h"
#include "base/strings.h"

namespace sovai::control {
namespace {

constexpr size_t kMaxFlavorIdBytes = 64;
constexpr size_t kMaxFlavors = 256;
constexpr int kMaxUnitsCeiling = 1024;
constexpr int kMaxPerUnitCeiling = 4096;  // GPUs or vCPUs in one unit
constexpr uint64_t kGiB = uint64_t{1} << 30;

// Hourly list prices of the reference cloud's AI Training flavors, per minute; operators edit
// them with --flavors. GPU units carry the vCPUs and memory that come with one GPU.
constexpr std::string_view kDefaultCatalog = R"json({
  "flavors": [
    {"id": "h200-1-gpu", "kind": "gpu", "gpu_model": "H200", "description": "NVIDIA H200 141 GB",
     "gpus_per_unit": 1, "vcpus_per_unit": 30, "memory_gib_per_unit": 200, "max_units": 4,
     "price_per_minute_eur": "0.0583"},
    {"id": "h100-1-gpu", "kind": "gpu", "gpu_model": "H100", "description": "NVIDIA H100 80 GB",
     "gpus_per_unit": 1, "vcpus_per_unit": 30, "memory_gib_per_unit": 200, "max_units": 4,
     "price_per_minute_eur": "0.0467"},
    {"id": "a100-1-gpu", "kind": "gpu", "gpu_model": "A100", "description": "NVIDIA A100 80 GB",
     "gpus_per_unit": 1, "vcpus_per_unit": 15, "memory_gib_per_unit": 180, "max_units": 4,
     "price_per_minute_eur": "0.0512"},
    {"id": "l40s-1-gpu", "kind": "gpu", "gpu_model": "L40S", "description": "NVIDIA L40S 48 GB",
     "gpus_per_unit": 1, "vcpus_per_unit": 15, "memory_gib_per_unit": 90, "max_units": 4,
     "price_per_minute_eur": "0.03"},
    {"id": "l4-1-gpu", "kind": "gpu", "gpu_model": "L4", "description": "NVIDIA L4 24 GB",
     "gpus_per_unit": 1, "vcpus_per_unit": 22, "memory_gib_per_unit": 90, "max_units": 4,
     "price_per_minute_eur": "0.0138"},
    {"id": "ai1-1-gpu", "kind": "gpu", "gpu_model": "V100S", "description": "NVIDIA V100S 32 GB",
     "gpus_per_unit": 1, "vcpus_per_unit": 13, "memory_gib_per_unit": 40, "max_units": 4,
     "price_per_minute_eur": "0.0322"},
    {"id": "ai1-1-cpu", "kind": "cpu", "description": "1 vCPU, 4 GiB",
     "vcpus_per_unit": 1, "memory_gib_per_unit": 4, "max_units": 12,
     "price_per_minute_eur": "0.0005"}
  ]
})json";

bool ValidFlavorId(std::string_view id) {
  if (id.empty() || id.size() > kMaxFlavorIdBytes) return false;
  for (char c : id) {
    if (!(std::islower(static_cast<unsigned char>(c)) ||
          std::isdigit(static_cast<unsigned char>(c)) || c == '-')) {
      return false;
    }
  }
  return true;
}

base::Result<Flavor> ParseFlavor(const nlohmann::json& j, const std::string& where) {
  auto in = [&](const base::Status& st) {
    return base::InvalidArgumentError(where + ": " + st.message());
  };
  auto bad = [&](std::string_view field, std::string_view what) {
    return base::InvalidArgumentError(where + ": field '" + std::string(field) + "' " +
                                      std::string(what));
  };
  Flavor f;
  auto id = base::GetString(j, "id");
  if (!id.ok()) return in(id.status());
  if (!ValidFlavorId(*id)) {
    return bad("id", "must be 1 to 64 characters of a-z, 0-9 and '-', not '" + *id + "'");
  }
  f.id = *id;
  const std::string named = "flavor '" + f.id + "'";
  auto field_error = [&](std::string_view field, std::string_view what) {
    return base::InvalidArgumentError(named + ": field '" + std::string(field) + "' " +
                                      std::string(what));
  };
  auto named_in = [&](const base::Status& st) {
    return base::InvalidArgumentError(named + ": " + st.message());
  };
  auto kind = base::GetString(j, "kind");
  if (!kind.ok()) return named_in(kind.status());
  if (*kind == "gpu") {
    f.kind = FlavorKind::kGpu;
  } else if (*kind == "cpu") {
    f.kind = FlavorKind::kCpu;
  } else {
    return field_error("kind", "must be \"gpu\" or \"cpu\", not \"" + *kind + "\"");
  }
  auto model = base::GetOptionalString(j, "gpu_model");
  if (!model.ok()) return named_in(model.status());
  f.gpu_model = model->value_or("");
  auto description = base::GetOptionalString(j, "description");
  if (!description.ok()) return named_in(description.status());
  f.description = description->value_or("");

  auto count = [&](std::string_view field, int64_t lo, int64_t hi,
                   std::optional<int64_t> fallback) -> base::Result<int> {
    auto v = base::GetOptionalInt(j, field);
    if (!v.ok()) return named_in(v.status());
    if (!v->has_value()) {
      if (fallback) return static_cast<int>(*fallback);
      return field_error(field, "is required");
    }
    if (**v < lo || **v > hi) {
      return field_error(field, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                    "], not " + std::to_string(**v));
    }
    return static_cast<int>(**v);
  };
  const bool gpu = f.kind == FlavorKind::kGpu;
  SOVAI_ASSIGN_OR_RETURN(f.gpus_per_unit,
                         count("gpus_per_unit", gpu ? 1 : 0, gpu ? kMaxPerUnitCeiling : 0, 0));
  if (gpu && f.gpus_per_unit == 0) return field_error("gpus_per_unit", "is required");
  if (gpu && f.gpu_model.empty()) return field_error("gpu_model", "is required for a gpu flavor");
  if (!gpu && !f.gpu_model.empty()) return field_error("gpu_model", "is only for gpu flavors");
  SOVAI_ASSIGN_OR_RETURN(f.vcpus_per_unit,
                         count("vcpus_per_unit", 1, kMaxPerUnitCeiling, std::nullopt));
  SOVAI_ASSIGN_OR_RETURN(int memory_gib, count("memory_gib_per_unit", 1, 1 << 20, std::nullopt));
  f.memory_bytes_per_unit = static_cast<uint64_t>(memory_gib) * kGiB;
  SOVAI_ASSIGN_OR_RETURN(f.max_units, count("max_units", 1, kMaxUnitsCeiling, std::nullopt));
  auto price = base::GetString(j, "price_per_minute_eur");
  if (!price.ok()) return named_in(price.status());
  auto micro = ParseMicroEur(*price);
  if (!micro.ok()) return field_error("price_per_minute_eur", micro.status().message());
  f.price_micro_eur_per_minute = *micro;
  return f;
}

}  // namespace

base::Result<int64_t> ParseMicroEur(std::string_view decimal) {
  auto bad = [&] {
    return base::InvalidArgumentError(
        "must be a non-negative decimal such as \"0.0467\" with at "
        "most 6 decimals, not \"" +
        std::string(decimal) + "\"");
  };
  size_t dot = decimal.find('.');
  std::string_view whole = decimal.substr(0, dot);
  std::string_view fraction = dot == std::string_view::npos ? "" : decimal.substr(dot + 1);
  if (whole.empty() || whole.size() > 9 || fraction.size() > 6) return bad();
  if (dot != std::string_view::npos && fraction.empty()) return bad();
  int64_t value = 0;
  for (char c : whole) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return bad();
    value = value * 10 + (c - '0');
  }
  int64_t micro = 0;
  int digits = 0;
  for (char c : fraction) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return bad();
    micro = micro * 10 + (c - '0');
    ++digits;
  }
  for (; digits < 6; ++digits) micro *= 10;
  return value * 1000000 + micro;
}

std::string FormatMicroEur(int64_t micro_eur) {
  std::string sign = micro_eur < 0 ? "-" : "";
  uint64_t v = micro_eur < 0 ? static_cast<uint64_t>(-(micro_eur + 1)) + 1
                             : static_cast<uint64_t>(micro_eur);
  std::string out = sign + std::to_string(v / 1000000);
  uint64_t fraction = v % 1000000;
  if (fraction == 0) return out;
  std::string digits = std::to_string(fraction);
  digits.insert(0, 6 - digits.size(), '0');
  while (digits.back() == '0') digits.pop_back();
  return out + "." + digits;
}

base::Result<FlavorCatalog> FlavorCatalog::Parse(std::string_view json) {
  SOVAI_ASSIGN_OR_RETURN(nlohmann::json doc, base::ParseJson(json));
  auto list = base::GetArray(doc, "flavors");
  if (!list.ok()) return base::InvalidArgumentError("flavor catalog: " + list.status().message());
  if ((*list)->empty()) return base::InvalidArgumentError("flavor catalog: 'flavors' is empty");
  if ((*list)->size() > kMaxFlavors) {
    return base::InvalidArgumentError("flavor catalog: more than " + std::to_string(kMaxFlavors) +
                                      " flavors");
  }
  FlavorCatalog catalog;
  std::set<std::string> seen;
  for (size_t i = 0; i < (*list)->size(); ++i) {
    const nlohmann::json& entry = (**list)[i];
    if (!entry.is_object()) {
      return base::InvalidArgumentError("flavor catalog: flavors[" + std::to_string(i) +
                                        "] must be an object");
    }
    SOVAI_ASSIGN_OR_RETURN(Flavor f, ParseFlavor(entry, "flavors[" + std::to_string(i) + "]"));
    if (!seen.insert(f.id).second) {
      return base::InvalidArgumentError("flavor catalog: flavor '" + f.id + "' appears twice");
    }
    catalog.flavors_.push_back(std::move(f));
  }
  return catalog;
}

const FlavorCatalog& FlavorCatalog::Default() {
  // Parsed once; the built-in document is part of the binary, so a failure is a bug.
  static const FlavorCatalog* const catalog = [] {
    auto parsed = Parse(kDefaultCatalog);
    SOVAI_CHECK(parsed.ok()) << parsed.status().ToString();
    return new FlavorCatalog(std::move(*parsed));
  }();
  return *catalog;
}

std::string_view FlavorCatalog::DefaultJson() { return kDefaultCatalog; }

base::Result<const Flavor*> FlavorCatalog::Find(std::string_view id) const {
  for (const Flavor& f : flavors_) {
    if (f.id == id) return &f;
  }
  std::vector<std::string> ids;
  for (const Flavor& f : flavors_) ids.push_back(f.id);
  return base::NotFoundError("unknown flavor '" + std::string(id) +
                             "'; known flavors: " + base::Join(ids, ", "));
}

base::Result<ResourceRequest> RequestFor(const Flavor& flavor, int units) {
  if (units < 1 || units > flavor.max_units) {
    const char* what = flavor.kind == FlavorKind::kGpu ? "GPUs" : "CPUs";
    return base::InvalidArgumentError("flavor " + flavor.id + " takes 1 to " +
                                      std::to_string(flavor.max_units) + " units (" + what +
                                      "), not " + std::to_string(units));
  }
  ResourceRequest r;
  r.gpus = flavor.gpus_per_unit * units;
  r.cpus = flavor.vcpus_per_unit * units;
  r.memory_bytes = flavor.memory_bytes_per_unit * static_cast<uint64_t>(units);
  r.gpu_model = flavor.gpu_model;
  return r;
}

bool GpuMatchesModel(std::string_view gpu_name, std::string_view model) {
  if (model.empty()) return false;
  const std::string name = base::AsciiToLower(gpu_name);
  const std::string want = base::AsciiToLower(model);
  auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  for (size_t at = name.find(want); at != std::string::npos; at = name.find(want, at + 1)) {
    bool starts = at == 0 || !word_char(name[at - 1]);
    size_t end = at + want.size();
    bool ends = end == name.size() || !word_char(name[end]);
    if (starts && ends) return true;
  }
  return false;
}

}  // namespace sovai::control
