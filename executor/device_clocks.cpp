#include "executor/device_clocks.hpp"

#include <cstdlib>
#include <dlfcn.h>
#include <fstream>
#include <sched.h>
#include <sstream>
#include <string>

namespace kiln {

namespace {

// The few NVML entry points used, declared here: nvml.h is not needed to build, and the library
// is looked up at run time.
using nvml_device = struct nvml_device_st*;
using nvml_init_fn = int (*)();
using nvml_by_bus_fn = int (*)(const char*, nvml_device*);
using nvml_clock_fn = int (*)(nvml_device, int, unsigned*);
using nvml_reasons_fn = int (*)(nvml_device, unsigned long long*);
using nvml_temp_fn = int (*)(nvml_device, int, unsigned*);
using nvml_power_fn = int (*)(nvml_device, unsigned*);
using nvml_name_fn = int (*)(nvml_device, char*, unsigned);
constexpr int nvml_clock_sm = 1, nvml_clock_mem = 2, nvml_temperature_gpu = 0;

class nvml_clocks : public device_clocks {
public:
  explicit nvml_clocks(std::string why) : why_(std::move(why)) {}

  static std::unique_ptr<device_clocks> open(const std::string& bus) {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
      return std::make_unique<nvml_clocks>("clocks unavailable: libnvidia-ml.so.1 not found");
    auto sym = [&](const char* n) { return dlsym(lib, n); };
    auto init = reinterpret_cast<nvml_init_fn>(sym("nvmlInit_v2"));
    auto by_bus = reinterpret_cast<nvml_by_bus_fn>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
    auto clock = reinterpret_cast<nvml_clock_fn>(sym("nvmlDeviceGetClockInfo"));
    auto max_clock = reinterpret_cast<nvml_clock_fn>(sym("nvmlDeviceGetMaxClockInfo"));
    // Renamed in newer drivers; both names stay exported.
    auto reasons = reinterpret_cast<nvml_reasons_fn>(sym("nvmlDeviceGetCurrentClocksEventReasons"));
    if (!reasons)
      reasons = reinterpret_cast<nvml_reasons_fn>(sym("nvmlDeviceGetCurrentClocksThrottleReasons"));
    auto temp = reinterpret_cast<nvml_temp_fn>(sym("nvmlDeviceGetTemperature"));
    auto power = reinterpret_cast<nvml_power_fn>(sym("nvmlDeviceGetPowerUsage"));
    auto name = reinterpret_cast<nvml_name_fn>(sym("nvmlDeviceGetName"));
    if (!init || !by_bus || !clock)
      return std::make_unique<nvml_clocks>("clocks unavailable: NVML lacks the entry points");
    if (int rc = init(); rc != 0)
      return std::make_unique<nvml_clocks>("clocks unavailable: nvmlInit failed (" +
                                           std::to_string(rc) + ")");
    nvml_device dev = nullptr;
    if (int rc = by_bus(bus.c_str(), &dev); rc != 0)
      return std::make_unique<nvml_clocks>("clocks unavailable: NVML has no device at " + bus +
                                           " (" + std::to_string(rc) + ")");
    auto c = std::make_unique<nvml_clocks>("");
    c->dev_ = dev;
    c->clock_ = clock;
    c->reasons_ = reasons;
    c->temp_ = temp;
    c->power_ = power;
    unsigned sm = 0, mem = 0;
    if (max_clock) {
      max_clock(dev, nvml_clock_sm, &sm);
      max_clock(dev, nvml_clock_mem, &mem);
    }
    char buf[96] = "";
    if (name) name(dev, buf, sizeof buf);
    std::ostringstream d;
    d << "nvml: " << buf << " at " << bus << ", max SM " << sm << " MHz, max memory " << mem
      << " MHz";
    c->describe_ = d.str();
    return c;
  }

  clock_sample sample() override {
    clock_sample s;
    if (!dev_) return s;
    unsigned v = 0;
    if (clock_(dev_, nvml_clock_sm, &v) == 0) s.sm_mhz = static_cast<int>(v);
    if (clock_(dev_, nvml_clock_mem, &v) == 0) s.mem_mhz = static_cast<int>(v);
    if (temp_ && temp_(dev_, nvml_temperature_gpu, &v) == 0) s.temperature_c = static_cast<int>(v);
    if (power_ && power_(dev_, &v) == 0) s.power_w = v / 1000.0;
    unsigned long long bits = 0;
    if (reasons_ && reasons_(dev_, &bits) == 0)
      s.throttle = throttle_reason_names(bits, &s.throttled);
    return s;
  }

  std::string describe() const override { return dev_ ? describe_ : why_; }

private:
  std::string why_, describe_;
  nvml_device dev_ = nullptr;
  nvml_clock_fn clock_ = nullptr;
  nvml_reasons_fn reasons_ = nullptr;
  nvml_temp_fn temp_ = nullptr;
  nvml_power_fn power_ = nullptr;
};

class cpu_clocks : public device_clocks {
public:
  clock_sample sample() override {
    clock_sample s;
    int cpu = sched_getcpu();
    // cpufreq where the kernel exposes it (kHz), else /proc/cpuinfo's "cpu MHz" of this core.
    std::ifstream f("/sys/devices/system/cpu/cpu" + std::to_string(cpu) +
                    "/cpufreq/scaling_cur_freq");
    long khz = 0;
    if (f >> khz && khz > 0) {
      s.sm_mhz = static_cast<int>(khz / 1000);
      return s;
    }
    std::ifstream info("/proc/cpuinfo");
    int current = -1;
    for (std::string line; std::getline(info, line);) {
      if (line.rfind("processor", 0) == 0) current = std::atoi(line.c_str() + line.find(':') + 1);
      if (current == cpu && line.rfind("cpu MHz", 0) == 0) {
        s.sm_mhz = static_cast<int>(std::atof(line.c_str() + line.find(':') + 1));
        break;
      }
    }
    return s;
  }
  std::string describe() const override {
    return "cpu: cpufreq or /proc/cpuinfo of the timing core";
  }
};

} // namespace

std::unique_ptr<device_clocks> device_clocks::open_nvml(const std::string& pci_bus_id) {
  return nvml_clocks::open(pci_bus_id);
}

std::unique_ptr<device_clocks> device_clocks::open_cpu() { return std::make_unique<cpu_clocks>(); }

std::string throttle_reason_names(uint64_t bits, bool* throttled) {
  // NVML's nvmlClocksEventReason* bits. Idle, application-clock and display settings are not
  // slowdowns of a busy GPU; the others are.
  static const struct {
    uint64_t bit;
    const char* name;
    bool slows;
  } reasons[] = {{0x1, "gpu_idle", false},
                 {0x2, "applications_clocks", false},
                 {0x4, "sw_power_cap", true},
                 {0x8, "hw_slowdown", true},
                 {0x10, "sync_boost", false},
                 {0x20, "sw_thermal_slowdown", true},
                 {0x40, "hw_thermal_slowdown", true},
                 {0x80, "hw_power_brake_slowdown", true},
                 {0x100, "display_clock", false}};
  std::string out;
  bool slow = false;
  for (const auto& r : reasons)
    if (bits & r.bit) {
      out += (out.empty() ? "" : "|") + std::string(r.name);
      slow = slow || r.slows;
    }
  if (throttled) *throttled = slow;
  return out;
}

} // namespace kiln
