// Chat-template parity (label: integration): renders real chat templates over the message lists
// of cases.json with our interpreter (src/model/chat_template.h) and with @huggingface/jinja
// (render_reference.mjs under node), and requires the same text, or an error on both sides
// where the reference fails. Both renderers get the same variables (ChatTemplate::BuildContext)
// and the same clock for strftime_now.
//
// A second reference, Python's Jinja2 set up as transformers does (python_reference.py), is used
// when python3 has jinja2; it checks the same cases against the semantics models are trained
// with.
//
// Exits 0 on success, 1 on any difference, 77 (skipped) when node or node_modules (the pinned
// npm packages of package.json) are missing.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/env.h"
#include "model/chat_template.h"

namespace {

using sovai::base::Env;
using sovai::model::ChatTemplate;
using sovai::model::ChatTemplateOptions;
using sovai::model::SpecialTokens;
using Json = nlohmann::ordered_json;

constexpr int kSkip = 77;
constexpr int64_t kNodeTimeoutMs = 120'000;

struct LoadedTemplate {
  std::string source;  // the template text exactly as the reference gets it
  std::unique_ptr<ChatTemplate> ours;
};

struct Job {
  std::string id;
  std::string template_id;
  std::string case_name;
  Json messages;
  Json tools;
  bool add_generation_prompt = false;
  Json extra;
  std::string expect_error;  // non-empty: both sides must fail with this in the message
};

std::string Escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out += c;
    }
  }
  return out;
}

// Where two texts first differ, with some context.
std::string DescribeDifference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  const size_t from = i > 40 ? i - 40 : 0;
  return "first difference at byte " + std::to_string(i) + "\n    reference: ..." +
         Escape(want.substr(from, 120)) + "\n    ours:      ..." + Escape(got.substr(from, 120));
}

std::optional<Json> ReadJson(Env& env, const std::string& path) {
  auto text = env.ReadFile(path);
  if (!text.ok()) {
    std::fprintf(stderr, "cannot read %s: %s\n", path.c_str(), text.status().ToString().c_str());
    return std::nullopt;
  }
  Json j = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    std::fprintf(stderr, "%s is not valid JSON\n", path.c_str());
    return std::nullopt;
  }
  return j;
}

}  // namespace

int main() {
  Env& env = Env::Default();
  const std::string root = SOVAI_SOURCE_DIR;
  const std::string data_dir = root + "/tests/model_templates";
  if (!env.FileExists(root + "/node_modules/@huggingface/jinja/package.json")) {
    std::printf("SKIP: node_modules/@huggingface/jinja is missing (run npm ci)\n");
    return kSkip;
  }
  {
    sovai::base::SpawnOptions probe;
    probe.argv = {"node", "--version"};
    probe.stdout_spec = sovai::base::StdioSpec::Null();
    auto run = sovai::base::RunAndCapture(env, probe, "", 10'000);
    if (!run.ok() || !run->exit.success()) {
      std::printf("SKIP: node is not installed\n");
      return kSkip;
    }
  }

  std::optional<Json> cases = ReadJson(env, data_dir + "/cases.json");
  if (!cases) return 1;
  const int64_t now_ms = (*cases)["now_ms"].get<int64_t>();
  ChatTemplateOptions options;
  options.render.now_unix_micros = [now_ms] { return now_ms * 1000; };

  std::map<std::string, LoadedTemplate> templates;
  for (const Json& t : (*cases)["templates"]) {
    const std::string id = t["id"].get<std::string>();
    LoadedTemplate loaded;
    if (t.contains("tokenizer_config")) {
      const std::string path = root + "/" + t["tokenizer_config"].get<std::string>();
      auto text = env.ReadFile(path);
      if (!text.ok()) {
        std::fprintf(stderr, "%s: %s\n", id.c_str(), text.status().ToString().c_str());
        return 1;
      }
      auto tpl = ChatTemplate::FromTokenizerConfig(*text, options);
      if (!tpl.ok()) {
        std::fprintf(stderr, "%s: %s\n", id.c_str(), tpl.status().ToString().c_str());
        return 1;
      }
      Json config = Json::parse(*text, nullptr, false);
      loaded.source = config["chat_template"].get<std::string>();
      loaded.ours = std::make_unique<ChatTemplate>(std::move(*tpl));
    } else if (t.contains("file")) {
      auto text = env.ReadFile(data_dir + "/" + t["file"].get<std::string>());
      if (!text.ok()) {
        std::fprintf(stderr, "%s: %s\n", id.c_str(), text.status().ToString().c_str());
        return 1;
      }
      SpecialTokens tokens;
      if (t.contains("bos_token")) tokens.bos_token = t["bos_token"].get<std::string>();
      if (t.contains("eos_token")) tokens.eos_token = t["eos_token"].get<std::string>();
      auto tpl = ChatTemplate::FromString(*text, tokens, options);
      if (!tpl.ok()) {
        std::fprintf(stderr, "%s: %s\n", id.c_str(), tpl.status().ToString().c_str());
        return 1;
      }
      loaded.source = *text;
      loaded.ours = std::make_unique<ChatTemplate>(std::move(*tpl));
    } else {
      loaded.source = std::string(sovai::model::kDefaultChatMLTemplate);
      loaded.ours = std::make_unique<ChatTemplate>(ChatTemplate::DefaultChatML({}, options));
    }
    templates.emplace(id, std::move(loaded));
  }

  std::vector<Job> jobs;
  Json request = Json::object();
  request["now_ms"] = now_ms;
  request["jobs"] = Json::array();
  for (const Json& c : (*cases)["cases"]) {
    const std::string mode = c["generation_prompt"].get<std::string>();
    std::vector<bool> prompts;
    if (mode == "both" || mode == "false") prompts.push_back(false);
    if (mode == "both" || mode == "true") prompts.push_back(true);
    for (const Json& tid : c["templates"]) {
      const std::string template_id = tid.get<std::string>();
      auto it = templates.find(template_id);
      if (it == templates.end()) {
        std::fprintf(stderr, "case %s names unknown template %s\n",
                     c["name"].get<std::string>().c_str(), template_id.c_str());
        return 1;
      }
      for (bool prompt : prompts) {
        Job job;
        job.template_id = template_id;
        job.case_name = c["name"].get<std::string>();
        job.id = job.case_name + "/" + template_id + (prompt ? "/gen" : "/nogen");
        job.messages = c["messages"];
        job.tools = c.contains("tools") ? c["tools"] : Json(nullptr);
        job.extra = c.contains("extra") ? c["extra"] : Json(nullptr);
        job.add_generation_prompt = prompt;
        if (c.contains("expect_error") && c["expect_error"].contains(template_id)) {
          job.expect_error = c["expect_error"][template_id].get<std::string>();
        }
        auto ctx = it->second.ours->BuildContext(job.messages, job.tools, prompt, job.extra);
        if (!ctx.ok()) {
          std::fprintf(stderr, "%s: %s\n", job.id.c_str(), ctx.status().ToString().c_str());
          return 1;
        }
        request["jobs"].push_back(
            Json{{"id", job.id}, {"template", it->second.source}, {"context", *ctx}});
        jobs.push_back(std::move(job));
      }
    }
  }

  // The reference each side is compared with: @huggingface/jinja always; Python's Jinja2 (as
  // transformers configures it) when python3 has jinja2 installed.
  struct Reference {
    std::string name;
    std::vector<std::string> argv;
    bool optional;
  };
  const std::vector<Reference> references = {
      {"@huggingface/jinja", {"node", data_dir + "/render_reference.mjs"}, false},
      {"Python Jinja2", {"python3", data_dir + "/python_reference.py"}, true},
  };
  int total_differences = 0;
  for (const Reference& reference : references) {
    sovai::base::SpawnOptions spawn;
    spawn.argv = reference.argv;
    spawn.env = {{"TZ", "UTC"}, {"LANG", "C.UTF-8"}};
    spawn.cwd = root;
    auto run = sovai::base::RunAndCapture(env, spawn, request.dump(), kNodeTimeoutMs);
    if (reference.optional && (!run.ok() || (run->exit.exited && run->exit.code == 3))) {
      std::printf("%s: not available, skipped\n", reference.name.c_str());
      continue;
    }
    if (!run.ok() || !run->exit.success()) {
      std::fprintf(stderr, "%s failed: %s\n%s\n", reference.name.c_str(),
                   run.ok() ? run->exit.ToString().c_str() : run.status().ToString().c_str(),
                   run.ok() ? run->stderr_text.c_str() : "");
      return 1;
    }
    Json response = Json::parse(run->stdout_text, nullptr, false);
    if (response.is_discarded() || !response.contains("results") ||
        response["results"].size() != jobs.size()) {
      std::fprintf(stderr, "%s returned malformed output\n", reference.name.c_str());
      return 1;
    }

    int same_text = 0, both_failed = 0, differences = 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
      const Job& job = jobs[i];
      const Json& ref = response["results"][i];
      const bool ref_ok = ref["ok"].get<bool>();
      auto ours =
          templates.at(job.template_id)
              .ours->RenderJson(job.messages, job.tools, job.add_generation_prompt, job.extra);
      std::string problem;
      if (ref_ok && ours.ok()) {
        if (*ours != ref["text"].get<std::string>()) {
          problem = DescribeDifference(ref["text"].get<std::string>(), *ours);
        } else if (!job.expect_error.empty()) {
          problem =
              "both rendered, but the case expects an error containing '" + job.expect_error + "'";
        } else {
          ++same_text;
        }
      } else if (!ref_ok && !ours.ok()) {
        const std::string ref_error = ref["error"].get<std::string>();
        if (job.expect_error.empty()) {
          problem = "both failed, unexpectedly:\n    reference: " + ref_error +
                    "\n    ours:      " + ours.status().ToString();
        } else if (ref_error.find(job.expect_error) == std::string::npos ||
                   ours.status().message().find(job.expect_error) == std::string::npos) {
          problem = "both failed, but not both with '" + job.expect_error +
                    "':\n    reference: " + ref_error +
                    "\n    ours:      " + ours.status().ToString();
        } else {
          ++both_failed;
        }
      } else if (ref_ok) {
        problem = "the reference rendered but ours failed: " + ours.status().ToString();
      } else {
        problem = "ours rendered but the reference failed: " + ref["error"].get<std::string>();
      }
      if (!problem.empty()) {
        ++differences;
        std::printf("DIFF [%s] %s: %s\n", reference.name.c_str(), job.id.c_str(), problem.c_str());
      }
    }
    std::printf("%s: %zu renders: %d identical texts, %d failing on both sides, %d differences\n",
                reference.name.c_str(), jobs.size(), same_text, both_failed, differences);
    // Guards against a vacuous pass (an empty cases file, a reference that fails everything).
    if (same_text < 50 || both_failed < 5) {
      std::printf("FAIL: too few comparisons with %s\n", reference.name.c_str());
      return 1;
    }
    total_differences += differences;
  }
  return total_differences == 0 ? 0 : 1;
}
