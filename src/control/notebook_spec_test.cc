#include "control/notebook_spec.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "control/scheduler.h"
#include "exec/local_executor.h"

namespace sovai::control {
namespace {

using Json = nlohmann::json;

SpecContext Context() { return {&FlavorCatalog::Default(), "EU-WEST-LOCAL"}; }

NotebookSpec ParseOk(const Json& body) {
  auto parsed = ParseNotebookSpec(body, Context());
  if (auto* error = std::get_if<SpecError>(&parsed)) {
    ADD_FAILURE() << error->status;
    return {};
  }
  return std::get<NotebookSpec>(parsed);
}

SpecError ParseError(const Json& body) {
  auto parsed = ParseNotebookSpec(body, Context());
  if (auto* error = std::get_if<SpecError>(&parsed)) return *error;
  ADD_FAILURE() << "parsed: " << body.dump();
  return {};
}

std::vector<std::string> BadFields(const Json& body) {
  std::vector<std::string> fields;
  for (const FieldError& f : ParseError(body).fields) fields.push_back(f.field);
  return fields;
}

bool Has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(NotebookSpecTest, OnlyTheFlavorIsRequired) {
  NotebookSpec spec = ParseOk({{"flavor", "ai1-1-cpu"}});
  EXPECT_EQ(spec.flavor, "ai1-1-cpu");
  EXPECT_EQ(spec.editor, "jupyter");
  EXPECT_EQ(spec.units, 1);
  EXPECT_EQ(spec.idle_timeout_s, kDefaultNotebookIdleTimeoutS);
  EXPECT_TRUE(spec.name.empty());
  EXPECT_TRUE(spec.volumes.empty());
  EXPECT_EQ(BadFields(Json::object()), std::vector<std::string>{"flavor"});
}

TEST(NotebookSpecTest, AFullSpecRoundTrips) {
  Json body = {
      {"name", "explore"},
      {"editor", "jupyter"},
      {"flavor", "ai1-1-cpu"},
      {"units", 2},
      {"volumes",
       {"data@EU-WEST-LOCAL/ds:/workspace/data:ro", "data@EU-WEST-LOCAL/w:/workspace/w:rw"}},
      {"labels", {{"team", "nlp"}}},
      {"env", {{"HF_HUB_OFFLINE", "1"}}},
      {"idle_timeout_s", 0}};
  NotebookSpec spec = ParseOk(body);
  EXPECT_EQ(spec.name, "explore");
  EXPECT_EQ(spec.units, 2);
  EXPECT_EQ(spec.volumes.size(), 2u);
  EXPECT_EQ(spec.labels.at("team"), "nlp");
  EXPECT_EQ(spec.env.at("HF_HUB_OFFLINE"), "1");
  EXPECT_EQ(spec.idle_timeout_s, 0);
  EXPECT_EQ(ParseOk(NotebookSpecToJson(spec)), spec);
}

TEST(NotebookSpecTest, TheEditorIsJupyterOrVscode) {
  EXPECT_EQ(ParseOk({{"flavor", "ai1-1-cpu"}, {"editor", "vscode"}}).editor, "vscode");
  EXPECT_EQ(ParseOk({{"flavor", "ai1-1-cpu"}, {"editor", "jupyter"}}).editor, "jupyter");
  NotebookSpec vscode = ParseOk({{"name", "code"}, {"flavor", "ai1-1-cpu"}, {"editor", "vscode"}});
  EXPECT_EQ(ParseOk(NotebookSpecToJson(vscode)), vscode);
  SpecError error = ParseError({{"flavor", "ai1-1-cpu"}, {"editor", "emacs"}});
  EXPECT_EQ(error.status.code(), base::StatusCode::kInvalidArgument);
  ASSERT_EQ(error.fields.size(), 1u);
  EXPECT_EQ(error.fields[0].field, "editor");
  EXPECT_NE(error.fields[0].message.find("vscode"), std::string::npos);
  EXPECT_EQ(BadFields({{"flavor", "ai1-1-cpu"}, {"editor", 1}}),
            std::vector<std::string>{"editor"});
}

TEST(NotebookSpecTest, CodeServersPasswordVariablesAreThePlatformsForVscode) {
  Json env = {{"PASSWORD", "x"}, {"HASHED_PASSWORD", "y"}, {"CODE_SERVER_COOKIE_SUFFIX", "z"}};
  std::vector<std::string> bad =
      BadFields({{"flavor", "ai1-1-cpu"}, {"editor", "vscode"}, {"env", env}});
  EXPECT_TRUE(Has(bad, "env.PASSWORD"));
  EXPECT_TRUE(Has(bad, "env.HASHED_PASSWORD"));
  EXPECT_TRUE(Has(bad, "env.CODE_SERVER_COOKIE_SUFFIX"));
  // Jupyter has no use for them: a user's PASSWORD is theirs.
  EXPECT_EQ(ParseOk({{"flavor", "ai1-1-cpu"}, {"env", {{"PASSWORD", "x"}}}}).env.at("PASSWORD"),
            "x");
}

TEST(NotebookSpecTest, BadFieldsAreNamed) {
  Json base = {{"flavor", "ai1-1-cpu"}};
  auto with = [&](const char* key, Json value) {
    Json body = base;
    body[key] = std::move(value);
    return BadFields(body);
  };
  EXPECT_TRUE(Has(with("name", "Not A Name"), "name"));
  EXPECT_TRUE(Has(with("name", 7), "name"));
  EXPECT_TRUE(Has(with("idle_timeout_s", -1), "idle_timeout_s"));
  EXPECT_TRUE(Has(with("idle_timeout_s", kMaxNotebookIdleTimeoutS + 1), "idle_timeout_s"));
  EXPECT_TRUE(Has(with("idle_timeout_s", "1h"), "idle_timeout_s"));
  EXPECT_TRUE(Has(with("units", 0), "units"));
  EXPECT_TRUE(Has(with("volumes", Json::array({"nope"})), "volumes[0]"));
  EXPECT_TRUE(Has(with("volumes", Json::array({"data@EU-WEST-LOCAL/x:/tmp/x:rw"})), "volumes[0]"));
  EXPECT_TRUE(Has(with("labels", {{"sovai.notebook", "x"}}), "labels.sovai.notebook"));
  EXPECT_TRUE(Has(with("env", {{"JUPYTER_TOKEN", "x"}}), "env.JUPYTER_TOKEN"));
  EXPECT_TRUE(Has(with("env", {{"PORT", "1"}}), "env.PORT"));
  EXPECT_TRUE(Has(with("image", "sovai/finetune"), "image"));  // an engine image
  EXPECT_TRUE(Has(with("command", Json::array({"sh"})), "command"));
  // Several problems are all reported.
  Json body = {{"flavor", "ai1-1-cpu"}, {"name", "BAD"}, {"editor", "vim"}};
  EXPECT_EQ(BadFields(body).size(), 2u);
}

TEST(NotebookSpecTest, AnUnknownFlavorIsNotFound) {
  SpecError error = ParseError({{"flavor", "no-such-flavor"}});
  EXPECT_EQ(error.status.code(), base::StatusCode::kNotFound);
  ASSERT_FALSE(error.fields.empty());
  EXPECT_EQ(error.fields[0].field, "flavor");
}

TEST(NotebookSpecTest, JupyterOpensInTheWorkspaceWhenVolumesAreThere) {
  NotebookSpec spec;
  EXPECT_EQ(NotebookDirOf(spec), "/tmp");
  spec.volumes = {"data@EU-WEST-LOCAL/x:/data:ro"};
  EXPECT_EQ(NotebookDirOf(spec), "/tmp");
  spec.volumes.push_back("data@EU-WEST-LOCAL/w:/workspace/w:rw");
  EXPECT_EQ(NotebookDirOf(spec), "/workspace");
  spec.volumes = {"data@EU-WEST-LOCAL/w:/workspace:rw"};
  EXPECT_EQ(NotebookDirOf(spec), "/workspace");
  spec.volumes = {"data@EU-WEST-LOCAL/w:/workspacex:rw"};
  EXPECT_EQ(NotebookDirOf(spec), "/tmp");
}

TEST(NotebookSpecTest, TheJobRunsJupyterWithThePlatformsToken) {
  NotebookSpec spec = ParseOk({{"flavor", "ai1-1-cpu"},
                               {"units", 2},
                               {"volumes", {"data@EU-WEST-LOCAL/w:/workspace/w:rw"}},
                               {"labels", {{"team", "nlp"}}},
                               {"env", {{"A", "b"}}}});
  JobSpec job = NotebookJobSpec("nb_1", spec, 41234, "s3cret");
  EXPECT_EQ(job.image, kShellImage);
  ASSERT_FALSE(job.command.empty());
  EXPECT_EQ(job.command[0], "jupyter-notebook");
  auto has_arg = [&](const std::string& arg) {
    return std::find(job.command.begin(), job.command.end(), arg) != job.command.end();
  };
  EXPECT_TRUE(has_arg("--no-browser"));
  EXPECT_TRUE(has_arg("--ip=127.0.0.1"));
  EXPECT_TRUE(has_arg("--port=41234"));
  EXPECT_TRUE(has_arg("--NotebookApp.base_url=/notebooks/nb_1/"));
  EXPECT_TRUE(has_arg("--NotebookApp.notebook_dir=/workspace"));
  for (const std::string& arg : job.command) {
    EXPECT_EQ(arg.find("s3cret"), std::string::npos) << "the token is never on the command line";
  }
  EXPECT_EQ(job.env.at("JUPYTER_TOKEN"), "s3cret");
  EXPECT_EQ(job.env.at("PORT"), "41234");
  EXPECT_EQ(job.env.at("A"), "b");
  EXPECT_EQ(job.env.at("JUPYTER_RUNTIME_DIR").rfind("/tmp/", 0), 0u);
  EXPECT_EQ(job.labels.at("sovai.notebook"), "nb_1");
  EXPECT_EQ(job.labels.at("team"), "nlp");
  EXPECT_EQ(job.flavor, "ai1-1-cpu");
  EXPECT_EQ(job.units, 2);
  EXPECT_EQ(job.volumes, spec.volumes);
  EXPECT_EQ(job.network, NetworkMode::kHost);
  EXPECT_EQ(job.timeout_s, kNotebookJobTimeoutS);
  // On another host (a Slurm node), Jupyter listens on the node's interfaces for the gateway.
  JobSpec remote = NotebookJobSpec("nb_1", spec, 41234, "s3cret", {"jupyter-notebook"}, true);
  EXPECT_NE(std::find(remote.command.begin(), remote.command.end(), "--ip=0.0.0.0"),
            remote.command.end());
  EXPECT_EQ(std::find(remote.command.begin(), remote.command.end(), "--ip=127.0.0.1"),
            remote.command.end());
  // A stand-in program keeps Jupyter's flags after its own arguments.
  JobSpec fake = NotebookJobSpec("nb_1", spec, 1, "t", {"python3", "fake.py"});
  EXPECT_EQ(fake.command[0], "python3");
  EXPECT_EQ(fake.command[1], "fake.py");
  EXPECT_EQ(fake.command[2], "--no-browser");
}

}  // namespace
}  // namespace sovai::control

namespace sovai::control {
namespace {

TEST(NotebookSpecTest, AnImageIsWhatAJobTakesButTheEngineImages) {
  for (const char* image :
       {"127.0.0.1:5000/team/torch-notebook:2.4", "torch-notebook:2.4",
        "team/nb@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "oci:data@EU-WEST-LOCAL/images/jupyter.tar"}) {
    NotebookSpec spec = ParseOk({{"name", "boxed"}, {"flavor", "ai1-1-cpu"}, {"image", image}});
    EXPECT_EQ(spec.image, image);
    EXPECT_EQ(ParseOk(NotebookSpecToJson(spec)), spec) << image;
    EXPECT_EQ(NotebookJobSpec("nb_1", spec, 41234, "t").image, image);
  }
  // None (or sovai/shell) is the host's root filesystem.
  EXPECT_EQ(ParseOk({{"flavor", "ai1-1-cpu"}}).image, "");
  EXPECT_EQ(ParseOk({{"flavor", "ai1-1-cpu"}, {"image", "sovai/shell"}}).image, "");
  EXPECT_EQ(ParseOk({{"flavor", "ai1-1-cpu"}, {"image", nullptr}}).image, "");
  EXPECT_TRUE(NotebookSpecToJson(ParseOk({{"flavor", "ai1-1-cpu"}}))["image"].is_null());
  for (const char* engine : {"sovai/finetune", "sovai/serve"}) {
    EXPECT_EQ(BadFields({{"flavor", "ai1-1-cpu"}, {"image", engine}}),
              std::vector<std::string>{"image"})
        << engine;
  }
  // The job's own rules, messages included.
  SpecError bad = ParseError({{"flavor", "ai1-1-cpu"}, {"image", "Bad Name!"}});
  ASSERT_EQ(bad.fields.size(), 1u);
  EXPECT_EQ(bad.fields[0].field, "image");
  EXPECT_NE(bad.fields[0].message.find("unknown image"), std::string::npos);
  EXPECT_EQ(BadFields({{"flavor", "ai1-1-cpu"}, {"image", "oci:nobucket"}}),
            std::vector<std::string>{"image"});
  EXPECT_EQ(BadFields({{"flavor", "ai1-1-cpu"}, {"image", "oci:data@MARS/x.tar"}}),
            std::vector<std::string>{"image"});
  EXPECT_EQ(BadFields({{"flavor", "ai1-1-cpu"}, {"image", 7}}), std::vector<std::string>{"image"});
}

// A GPU flavor's notebook is a GPU job: the scheduler gives it GPUs by index, and the sandbox
// of a workload with GPU ids gets them (the path of every job; docs/api/notebooks.md "Images").
TEST(NotebookSpecTest, AGpuFlavorMakesAGpuJobWhoseSandboxGetsTheGpus) {
  NotebookSpec spec = ParseOk({{"flavor", "h100-1-gpu"}, {"units", 2}});
  JobSpec job = NotebookJobSpec("nb_1", spec, 41234, "t");
  EXPECT_EQ(job.flavor, "h100-1-gpu");
  EXPECT_EQ(job.units, 2);
  auto flavor = FlavorCatalog::Default().Find(job.flavor);
  ASSERT_TRUE(flavor.ok());
  auto request = RequestFor(**flavor, job.units);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->gpus, 2);

  Capacity capacity;
  capacity.cpus = 64;
  capacity.memory_bytes = uint64_t{512} << 30;
  for (int i = 0; i < 4; ++i) capacity.gpus.push_back({i, "NVIDIA H100 80GB HBM3"});
  Scheduler scheduler(capacity);
  scheduler.Enqueue({"job_1", "prj_1", 0, *request});
  std::vector<Placement> placed = scheduler.Schedule();
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_EQ(placed[0].allocation.gpus.size(), 2u);

  exec::WorkloadSpec workload;
  workload.id = "job_1";
  workload.dir = "/tmp/sovai-notebook-gpu-test";
  workload.image = job.image;
  workload.command = job.command;
  workload.resources.gpus = request->gpus;
  workload.resources.gpu_ids = placed[0].allocation.gpus;
  auto sandbox = exec::BuildSandboxSpec(workload, std::nullopt, "");
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  EXPECT_EQ(sandbox->gpus, placed[0].allocation.gpus);
  EXPECT_EQ(sandbox->argv.front(), "jupyter-notebook");
}

}  // namespace
}  // namespace sovai::control
