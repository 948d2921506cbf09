// The Python package's extension module, kiln._kiln (python/kiln/__init__.py re-exports it):
// engines, execution contexts, sessions, streaming sessions, the build entry point. The GIL is released
// while kiln runs; a context or session is locked while it runs, so two Python threads sharing one
// serialize instead of racing (give each thread its own context for parallelism).
#include <pybind11/stl.h>

#include <chrono>
#include <mutex>

#include "kiln/builder.h"
#include "kiln/engine.h"
#include "kiln/logging.h"
#include "kiln/session.h"
#include "kiln/streaming_session.h"
#include "kiln/version.h"
#include "py_common.h"

namespace kiln::python {

void register_queue(py::module_& m);

namespace {

using EnginePtr = std::shared_ptr<api::Engine>;

py::dict binding_dict(const BindingInfo& b, bool input) {
  py::dict d;
  d["name"] = b.name;
  d["dtype"] = numpy_dtype(b.dtype);
  if (input) {
    d["min"] = py::tuple(py::cast(b.min.vec()));
    d["opt"] = py::tuple(py::cast(b.opt.vec()));
    d["max"] = py::tuple(py::cast(b.max.vec()));
    d["dim_names"] = b.dim_names;
  }
  return d;
}

py::dict profile_dict(const ProfileInfo& p) {
  py::dict d;
  py::list inputs, outputs;
  for (const auto& b : p.inputs) inputs.append(binding_dict(b, true));
  for (const auto& b : p.outputs) outputs.append(binding_dict(b, false));
  d["name"] = p.name;
  d["inputs"] = inputs;
  d["outputs"] = outputs;
  return d;
}

py::dict info_dict(const EngineInfo& i) {
  py::dict d;
  d["format_version"] = i.format_version;
  d["producer"] = i.producer;
  d["source_model"] = i.source_model;
  d["precision"] = i.precision;
  d["file_bytes"] = i.file_bytes;
  d["weight_bytes"] = i.weight_bytes;
  d["tactic_threads"] = i.tactic_threads;
  py::list libs;
  for (const auto& l : i.plugin_libraries) {
    py::dict ld;
    ld["name"] = l.name;
    ld["version"] = l.version;
    ld["file_name"] = l.file_name;
    ld["built_from"] = l.built_from;
    ld["plugins"] = l.plugins;
    libs.append(ld);
  }
  d["plugin_libraries"] = libs;
  if (i.has_streaming) {
    py::dict s;
    s["cold_start"] = i.streaming.cold_start;
    s["step"] = i.streaming.step;
    py::list state;
    for (const auto& st : i.streaming.state) state.append(py::dict(py::arg("output") = st.output, py::arg("input") = st.input, py::arg("axis") = st.axis));
    s["state"] = state;
    s["tokens_per_step"] = i.streaming.tokens_per_step;
    s["max_steps"] = i.streaming.max_steps;
    s["mask_input"] = i.streaming.mask_input;
    d["streaming"] = s;
  } else {
    d["streaming"] = py::none();
  }
  return d;
}

// An execution context run from Python. Returned arrays must outlive later runs, so each run's
// outputs are fresh arrays: once a run at the same input shapes has shown the output shapes, the
// arrays are allocated first and bound as the outputs (the kernels write into them, no copy);
// otherwise (new shapes, or an output that cannot be bound) the outputs are copied after the run.
class Context {
 public:
  Context(EnginePtr engine, std::unique_ptr<api::ExecutionContext> ctx) : engine_(std::move(engine)), ctx_(std::move(ctx)) {
    const ProfileInfo& p = engine_->profiles()[engine_->find_profile(ctx_->profile())];
    for (size_t i = 0; i < ctx_->num_inputs(); ++i) dtypes_.push_back(p.inputs[i].dtype);
    bindable_.assign(ctx_->num_outputs(), true);
  }

  py::dict run(const py::dict& inputs) {
    std::vector<py::array> held;   // keeps converted inputs alive until the run returns
    held.reserve(inputs.size());
    views_.assign(ctx_->num_inputs(), TensorView{});
    for (const auto& [key, value] : inputs) {
      const std::string name = py::str(key);
      const int i = ctx_->find_input(name);
      if (i < 0) check(NotFound("profile '" + ctx_->profile() + "' has no input named '" + name + "' (inputs: " + join(input_names_list()) + ")"));
      views_[i] = input_view(value, dtypes_[i], name, held);
    }
    for (size_t i = 0; i < views_.size(); ++i)
      if (!views_[i].present()) check(InvalidArgument("missing input '" + ctx_->input_name(i) + "' for profile '" + ctx_->profile() + "'"));
    // Output arrays for input shapes seen before.
    std::vector<py::object> outs(ctx_->num_outputs());
    const std::vector<TensorDesc>* known = known_outputs();
    if (known)
      for (size_t o = 0; o < outs.size(); ++o)
        if (bindable_[o]) outs[o] = py::array(numpy_dtype((*known)[o].dtype), std::vector<py::ssize_t>((*known)[o].shape.begin(), (*known)[o].shape.end()));
    std::vector<TensorView> buffers(outs.size());
    for (size_t o = 0; o < outs.size(); ++o)
      if (outs[o]) {
        buffers[o] = view_of(py::reinterpret_borrow<py::array>(outs[o]));
        buffers[o].dtype = (*known)[o].dtype;
      }
    Status st;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      st = run_locked(buffers);
    }
    check(st);
    for (size_t o = 0; o < outs.size(); ++o)
      if (!buffers[o].present()) outs[o] = py::object();   // not written there: copied below
    py::dict result;
    std::vector<TensorDesc> descs(outs.size());
    for (size_t o = 0; o < outs.size(); ++o) {
      const TensorView& v = ctx_->output(o);
      descs[o] = v.desc();
      result[py::str(ctx_->output_name(o))] = outs[o] ? outs[o] : py::object(copy_to_numpy(v));
    }
    if (!known) remember(std::move(descs));
    return result;
  }

  void prepare() {
    Status st;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      st = ctx_->prepare_for_profile();
    }
    check(st);
  }

  // For bench/python_overhead.py: `n` runs timed in C++ (ms each), inputs bound once, outputs left
  // in the context's arena: what a C++ program's loop costs, to compare run() against.
  std::vector<double> time_runs(const py::dict& inputs, int n) {
    std::vector<py::array> held;
    std::vector<std::pair<std::string, TensorView>> views;
    for (const auto& [key, value] : inputs) {
      const std::string name = py::str(key);
      const int i = ctx_->find_input(name);
      if (i < 0) check(NotFound("no input named '" + name + "'"));
      views.emplace_back(name, input_view(value, dtypes_[i], name, held));
    }
    std::vector<double> ms;
    Status st;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t o = 0; o < ctx_->num_outputs() && st.ok(); ++o) st = ctx_->bind_output(ctx_->output_name(o), TensorView{});
      for (const auto& [name, v] : views)
        if (st.ok()) st = ctx_->set_input(name, v);
      for (int i = 0; i < n && st.ok(); ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        st = ctx_->run();
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
    }
    check(st);
    return ms;
  }

  std::vector<std::string> input_names_list() const {
    std::vector<std::string> names;
    for (size_t i = 0; i < ctx_->num_inputs(); ++i) names.push_back(ctx_->input_name(i));
    return names;
  }
  std::vector<std::string> output_names_list() const {
    std::vector<std::string> names;
    for (size_t i = 0; i < ctx_->num_outputs(); ++i) names.push_back(ctx_->output_name(i));
    return names;
  }
  const std::string& profile() const { return ctx_->profile(); }

 private:
  // Without the GIL (no Python object is touched). `buffers` are bound as the outputs, absent ones
  // unbound; on return a buffer is still present only if its output was written there. If the run
  // with bound outputs fails (an output whose shape depends on input values changed), it runs
  // again with none bound.
  Status run_locked(std::vector<TensorView>& buffers) {
    for (size_t i = 0; i < views_.size(); ++i) KILN_RETURN_IF_ERROR(ctx_->set_input(i, views_[i]));
    bool any_bound = false;
    for (size_t o = 0; o < buffers.size(); ++o) {
      if (!ctx_->bind_output(ctx_->output_name(o), buffers[o]).ok()) {
        bindable_[o] = false;   // e.g. a constant output: copied instead, from now on
        buffers[o] = TensorView{};
        (void)ctx_->bind_output(ctx_->output_name(o), TensorView{});
      }
      any_bound = any_bound || buffers[o].present();
    }
    Status st = ctx_->run();
    if (st.ok() || !any_bound) return st;
    for (size_t o = 0; o < buffers.size(); ++o) {
      buffers[o] = TensorView{};
      (void)ctx_->bind_output(ctx_->output_name(o), TensorView{});
    }
    return ctx_->run();
  }

  const std::vector<TensorDesc>* known_outputs() const {
    for (const auto& [shapes, descs] : seen_)
      if (same_shapes(shapes)) return &descs;
    return nullptr;
  }
  bool same_shapes(const std::vector<Shape>& shapes) const {
    for (size_t i = 0; i < views_.size(); ++i)
      if (shapes[i] != views_[i].shape) return false;
    return true;
  }
  void remember(std::vector<TensorDesc> descs) {
    std::vector<Shape> shapes;
    for (const auto& v : views_) shapes.push_back(v.shape);
    if (seen_.size() == 8) seen_.erase(seen_.begin());   // a few shape sets: profiles switch between min/opt/max at most
    seen_.emplace_back(std::move(shapes), std::move(descs));
  }
  static std::string join(const std::vector<std::string>& names) {
    std::string s;
    for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
    return s;
  }

  EnginePtr engine_;
  std::unique_ptr<api::ExecutionContext> ctx_;
  std::vector<DType> dtypes_;
  std::vector<TensorView> views_;
  std::vector<bool> bindable_;
  std::vector<std::pair<std::vector<Shape>, std::vector<TensorDesc>>> seen_;
  std::mutex mu_;
};

// The streaming session: cold_start() and step() take the per-step inputs and return the step's
// non-state outputs; state(name) copies a state output.
class Session {
 public:
  explicit Session(EnginePtr engine) : engine_(std::move(engine)) {
    if (!engine_->info().has_streaming)
      check(FailedPrecondition("the engine records no streaming section; build it from a config with `streaming:`"));
    auto s = api::StreamingSession::create(engine_);
    check(s.status());
    session_ = std::move(s).value();
    const StreamingSpec& spec = engine_->info().streaming;
    const ProfileInfo& warm = engine_->profiles()[engine_->find_profile(spec.step)];
    for (const auto& b : warm.outputs) {
      bool state = false;
      for (const auto& st : spec.state) state = state || st.output == b.name;
      if (!state) outputs_.push_back(b.name);
    }
    for (const auto& p : engine_->profiles())
      for (const auto& b : p.inputs) dtypes_[b.name] = b.dtype;
  }

  py::dict cold_start(const py::dict& inputs) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      session_->reset();
    }
    return step(inputs);
  }

  py::dict step(const py::dict& inputs) {
    std::vector<py::array> held;
    std::vector<std::pair<std::string, TensorView>> views;
    for (const auto& [key, value] : inputs) {
      const std::string name = py::str(key);
      auto dt = dtypes_.find(name);
      if (dt == dtypes_.end()) check(NotFound("the engine has no input named '" + name + "'"));
      views.emplace_back(name, input_view(value, dt->second, name, held));
    }
    Status st;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      st = session_->step(views);
    }
    check(st);
    py::dict out;
    for (const auto& name : outputs_) {
      auto v = session_->output(name);
      check(v.status());
      out[py::str(name)] = copy_to_numpy(*v);
    }
    return out;
  }

  py::array state(const std::string& name) {
    auto t = session_->state(name);
    check(t.status());
    return tensor_to_numpy(std::move(t).value());
  }

  py::dict last_stats() const {
    const StreamingStepStats& s = session_->last_stats();
    py::dict d;
    d["cold_start"] = s.cold_start;
    d["cached_rows"] = s.cached_rows;
    d["new_rows"] = s.new_rows;
    d["state_bytes_copied"] = s.state_bytes_copied;
    d["state_bytes_appended"] = s.state_bytes_appended;
    d["in_place"] = s.in_place;
    return d;
  }
  int64_t steps_run() const { return session_->steps_run(); }
  int64_t cached_rows() const { return session_->cached_rows(); }

 private:
  EnginePtr engine_;
  std::unique_ptr<api::StreamingSession> session_;
  std::vector<std::string> outputs_;
  std::map<std::string, DType> dtypes_;
  std::mutex mu_;
};

// kiln.Session: the entries of a multi-entry engine over state buffers the session keeps.
// run(entry, inputs) returns every output as a copy; read_state / write_state copy a state.
class EntrySession {
 public:
  explicit EntrySession(EnginePtr engine) : engine_(std::move(engine)) {
    auto s = api::Session::create(engine_);
    check(s.status());
    session_ = std::move(s).value();
  }

  py::dict run(const std::string& entry, const py::dict& inputs, const std::string& profile) {
    std::vector<py::array> held;
    std::vector<std::pair<std::string, TensorView>> views;
    for (const auto& [key, value] : inputs) {
      const std::string name = py::str(key);
      DType dtype = DType::kUndefined;
      for (const auto& p : engine_->profiles())
        if (p.entry == entry)
          for (const auto& b : p.inputs)
            if (b.name == name) dtype = b.dtype;
      if (dtype == DType::kUndefined) check(NotFound("entry '" + entry + "' has no input named '" + name + "'"));
      views.emplace_back(name, input_view(value, dtype, name, held));
    }
    StatusOr<std::span<const std::pair<std::string, TensorView>>> outs = Status();
    // Held until the outputs are copied: they are views a next run would overwrite.
    std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
    {
      py::gil_scoped_release release;
      lock.lock();
      outs = session_->run(entry, views, profile);
    }
    check(outs.status());
    py::dict out;
    for (const auto& [name, view] : *outs) out[py::str(name)] = copy_to_numpy(view);
    return out;
  }

  void reset() {
    std::lock_guard<std::mutex> lock(mu_);
    session_->reset();
  }

  py::array read_state(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    auto t = session_->read_state(name);
    check(t.status());
    return tensor_to_numpy(std::move(t).value());
  }

  void write_state(const std::string& name, const py::handle& value) {
    const StateBufferSpec* spec = nullptr;
    for (const auto& st : engine_->info().state)
      if (st.name == name) spec = &st;
    if (!spec) check(NotFound("the engine has no state '" + name + "'"));
    std::vector<py::array> held;
    const TensorView v = input_view(value, spec->dtype, "state '" + name + "'", held);
    std::lock_guard<std::mutex> lock(mu_);
    check(session_->write_state(name, v));
  }

  std::vector<std::string> state_names() const {
    std::vector<std::string> names;
    for (const auto& st : engine_->info().state) names.push_back(st.name);
    return names;
  }

  py::dict last_stats() const {
    const SessionRunStats& s = session_->last_stats();
    py::dict d;
    d["profile"] = std::string(s.profile);
    d["state_bytes_read"] = s.state_bytes_read;
    d["state_bytes_written"] = s.state_bytes_written;
    d["state_bytes_copied"] = s.state_bytes_copied;
    return d;
  }

 private:
  EnginePtr engine_;
  std::unique_ptr<api::Session> session_;
  std::mutex mu_;
};

EnginePtr load_engine(const std::string& path, const std::vector<std::string>& plugin_dirs) {
  LoadOptions options;
  options.plugin_dirs = plugin_dirs;
  StatusOr<std::shared_ptr<api::Engine>> e = Status();
  {
    py::gil_scoped_release release;
    e = api::Engine::load_file(path, options);
  }
  check(e.status());
  return std::move(e).value();
}

// A Python callable as the kiln log sink: messages from other threads take the GIL.
class PyLogger final : public ILogger {
 public:
  explicit PyLogger(py::function fn) : fn_(std::move(fn)) {}
  ~PyLogger() override {
    py::gil_scoped_acquire gil;
    fn_ = py::function();
  }
  void log(LogLevel level, const char* message) noexcept override {
    py::gil_scoped_acquire gil;
    try {
      fn_(static_cast<int>(level), message);
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("kiln log callback");
    }
  }

 private:
  py::function fn_;
};

}  // namespace

}  // namespace kiln::python

PYBIND11_MODULE(_kiln, m) {
  using namespace kiln;
  using namespace kiln::python;
  m.doc() = "kiln: load and run kiln engines (see docs/python.md)";
  m.attr("__version__") = KILN_VERSION_STRING;
  register_error(m);

  py::class_<api::Engine, EnginePtr>(m, "Engine", "An engine file loaded for running (immutable; share it between threads).")
      .def(py::init(&load_engine), py::arg("path"), py::arg("plugin_dirs") = std::vector<std::string>{},
           "Loads an engine file; plugin libraries are searched in plugin_dirs, KILN_PLUGIN_PATH and the engine's folder.")
      .def_property_readonly("profiles", [](const api::Engine& e) {
        std::vector<std::string> names;
        for (const auto& p : e.profiles()) names.push_back(p.name);
        return names;
      }, "Profile names, in build order.")
      .def("profile", [](const api::Engine& e, const std::string& name) {
        const int p = e.find_profile(name);
        if (p < 0) check(NotFound("the engine has no profile '" + name + "'"));
        return profile_dict(e.profiles()[p]);
      }, py::arg("name"), "A profile's inputs (name, dtype, min/opt/max shapes, dim names) and outputs (name, dtype).")
      .def_property_readonly("info", [](const api::Engine& e) { return info_dict(e.info()); })
      .def("create_context", [](const EnginePtr& e, const std::string& profile, bool prepare) {
        StatusOr<std::unique_ptr<api::ExecutionContext>> ctx = Status();
        {
          py::gil_scoped_release release;
          ctx = e->create_context(profile, prepare);
        }
        check(ctx.status());
        return std::make_unique<Context>(e, std::move(ctx).value());
      }, py::arg("profile"), py::arg("prepare") = false, "A context for one profile (one per thread).")
      .def("create_session", [](const EnginePtr& e) { return std::make_unique<Session>(e); },
           "The engine's streaming session (its `streaming` section).");

  py::class_<Context>(m, "Context", "Runs one profile: run({name: array}) -> {name: array}.")
      .def("run", &Context::run, py::arg("inputs"),
           "Runs the profile. Inputs that are C-contiguous arrays of the input's dtype are read in place; returned arrays are "
           "copies that stay valid after later runs.")
      .def("prepare", &Context::prepare, "Plans for the profile's max and opt shapes, so the first run allocates nothing.")
      .def("_time_runs", &Context::time_runs, py::arg("inputs"), py::arg("n"),
           "Benchmark hook: n runs timed in C++ (ms each), outputs left inside the context (bench/python_overhead.py).")
      .def_property_readonly("profile", &Context::profile)
      .def_property_readonly("input_names", &Context::input_names_list)
      .def_property_readonly("output_names", &Context::output_names_list);

  py::class_<Session>(m, "StreamingSession", "The control loop: cold_start(inputs), then step(inputs) per period.")
      .def(py::init<EnginePtr>(), py::arg("engine"))
      .def("cold_start", &Session::cold_start, py::arg("inputs"), "Starts over with the cold-start profile; returns the non-state outputs.")
      .def("step", &Session::step, py::arg("inputs"), "One step (a cold start if none ran yet); returns the non-state outputs.")
      .def("state", &Session::state, py::arg("output"), "A copy of a state output of the last step.")
      .def_property_readonly("last_stats", &Session::last_stats)
      .def_property_readonly("steps_run", &Session::steps_run)
      .def_property_readonly("cached_rows", &Session::cached_rows);

  py::class_<EntrySession>(m, "Session",
                           "State kept across the entries of a multi-entry engine: run(entry, inputs), reset(), read_state, write_state.")
      .def(py::init<EnginePtr>(), py::arg("engine"))
      .def("run", &EntrySession::run, py::arg("entry"), py::arg("inputs"), py::arg("profile") = "",
           "Runs one entry with the inputs it does not read from state; returns every output (copies).")
      .def("reset", &EntrySession::reset, "Zeroes every state buffer.")
      .def("read_state", &EntrySession::read_state, py::arg("name"), "A copy of a state buffer.")
      .def("write_state", &EntrySession::write_state, py::arg("name"), py::arg("value"),
           "Overwrites a state buffer with an array of its dtype and shape.")
      .def_property_readonly("state_names", &EntrySession::state_names)
      .def_property_readonly("last_stats", &EntrySession::last_stats);

  register_queue(m);

  m.def("_build", [](const std::string& config, const std::vector<std::pair<std::string, std::string>>& overrides, const std::string& output,
                     const std::string& report, bool benchmark) {
    StatusOr<BuildOutcome> out = Status();
    {
      py::gil_scoped_release release;
      out = kiln::build(BuildRequest{config, overrides, output, report, benchmark});
    }
    check(out.status());
    return py::make_tuple(out->engine_path, out->report_path, out->report_json);
  });

  m.def("set_log_level", [](const std::string& level) {
    LogLevel l;
    if (!parse_log_level(level, &l)) check(InvalidArgument("log level '" + level + "' is not one of trace, debug, info, warn, error, off"));
    set_log_level(l);
  }, py::arg("level"));
  m.def("set_logger", [](py::object fn) {
    if (fn.is_none()) set_logger(nullptr);
    else set_logger(std::make_shared<PyLogger>(fn.cast<py::function>()));
  }, py::arg("callback"), "Routes kiln's log to callback(level: int, message: str) (None: back to stderr).");
}
