// Server info, presigned URLs, flavors and jobs: /v1/info, /v1/presign, /v1/flavors, /v1/jobs.

#include "control/rest_handlers.h"

namespace sovai::control::rest {
namespace {

class JobApi : public RestHandlers {
 public:
  using RestHandlers::RestHandlers;

  net::Response Info(net::Request&, const Principal&) {
    const ControlPlane::ServerInfo& info = control_.info();
    return JsonResponse(
        200, {{"region", info.region}, {"s3_url", info.s3_url}, {"version", info.version}});
  }

  // POST /v1/presign (presign.h, docs/panel.md): one S3 request signed with the project's S3
  // credentials. Buckets carry no labels, so a selector-limited token is refused; a read token
  // may presign only GET and HEAD. The URL never outlives the token.
  net::Response Presign(net::Request& request, const Principal& p) {
    if (Status st = RequireUnlabeled(p, "buckets"); !st.ok()) return Problem(st);
    auto body = ReadObject(request);
    if (!body.ok()) return Problem(body.status());
    // Before any other check: whatever else is wrong, a read token asking for more than a read
    // is refused as such.
    if (p.role == Role::kRead) {
      auto method = body->find("method");
      if (method == body->end() || !method->is_string() ||
          (*method != "GET" && *method != "HEAD")) {
        return FieldProblem(base::PermissionDeniedError("token " + p.token.id +
                                                        " has role 'read', which may presign only "
                                                        "GET and HEAD requests"),
                            "method");
      }
    }
    auto parsed = ParsePresignRequest(*body);
    if (auto* errors = std::get_if<std::vector<FieldError>>(&parsed)) return Invalid(*errors);
    PresignSpec spec = std::get<PresignSpec>(std::move(parsed));
    if (!control_.s3_access()) {
      return Problem(base::UnavailableError("presigned URLs are not available on this server"));
    }
    auto access = control_.s3_access()(p.project.id);
    if (!access.ok()) return Problem(access.status());
    const int64_t now = control_.env().NowUnixMicros();
    if (p.token.expires_at_us) {
      const int64_t left_s = (*p.token.expires_at_us - now) / 1'000'000;
      spec.expires_s = std::max<int64_t>(1, std::min(spec.expires_s, left_s));
    }
    auto url = PresignUrl(spec, *access, request.header("Host").value_or(""), now);
    if (!url.ok()) return Problem(url.status());
    return JsonResponse(200,
                        {{"url", *url},
                         {"method", spec.method},
                         {"expires_at", base::FormatRfc3339(now + spec.expires_s * 1'000'000)}});
  }

  net::Response ListFlavors(net::Request&, const Principal&) {
    JobService* jobs = control_.jobs();
    const FlavorCatalog* flavors = control_.flavors();
    if (jobs == nullptr || flavors == nullptr) return Problem(NoJobs());
    Json items = Json::array();
    for (const Flavor& f : flavors->flavors()) {
      Status fits = Status();
      auto request = RequestFor(f, 1);
      fits = request.ok() ? jobs->CheckFits(*request) : request.status();
      items.push_back({{"id", f.id},
                       {"kind", f.kind == FlavorKind::kGpu ? "gpu" : "cpu"},
                       {"gpu_model", f.gpu_model},
                       {"description", f.description},
                       {"gpus_per_unit", f.gpus_per_unit},
                       {"vcpus_per_unit", f.vcpus_per_unit},
                       {"memory_bytes_per_unit", f.memory_bytes_per_unit},
                       {"max_units", f.max_units},
                       {"price_per_minute_eur", FormatMicroEur(f.price_micro_eur_per_minute)},
                       {"available", fits.ok()},
                       {"reason", fits.ok() ? "" : fits.message()}});
    }
    return JsonResponse(200, {{"items", std::move(items)}});
  }

  net::Response CreateJob(net::Request& request, const Principal& p) {
    bool dry_run = false;
    if (auto bad = ParseDryRun(request, &dry_run)) return *bad;
    if (dry_run) return DryRunJob(request, p);
    JobService* jobs = control_.jobs();
    if (jobs == nullptr) return Problem(NoJobs());
    auto text = request.body().ReadAll();
    if (!text.ok()) return Problem(text.status());
    auto body = base::ParseJson(
        *text, base::JsonLimits{.max_bytes = kMaxJobSpecBytes, .max_depth = kMaxRequestJsonDepth});
    if (!body.ok()) return Problem(body.status());
    auto ctx = Spec(control_.flavors(), p);
    if (!ctx.ok()) return Problem(ctx.status());
    auto parsed = ParseJobSpec(*body, *ctx);
    if (auto* error = std::get_if<SpecError>(&parsed)) {
      return ProblemResponse(error->status, error->fields);
    }
    JobSpec spec = std::get<JobSpec>(std::move(parsed));
    if (auto bad = ApplySelectorLabels(p, spec.labels)) return *bad;
    if (auto refused = CheckResidencyOf(p, SourcesOf(spec))) return *refused;
    std::string bad_field;
    auto job = jobs->Submit(p.project.id, p.user.id, std::move(spec), &bad_field);
    if (!job.ok()) {
      return bad_field.empty() ? Problem(job.status()) : FieldProblem(job.status(), bad_field);
    }
    // A job that runs a registry image records the digest it resolved to (jobs.h).
    if (!job->image_digest.empty() && audit_detail_ != nullptr) {
      *audit_detail_ = "image " + job->spec.image + " resolved to " + job->image_digest;
    }
    return JsonResponse(201, JobToJson(*job));
  }

  net::Response ListJobs(net::Request& request, const Principal& p) {
    JobService* jobs = control_.jobs();
    if (jobs == nullptr) return Problem(NoJobs());
    PageRequest page;
    std::vector<FieldError> errors = ParsePage(request, &page);
    std::map<std::string, std::string> labels = p.token.selector.labels();
    if (auto filter = request.query("labels")) {
      auto selector = LabelSelector::Parse(*filter);
      if (!selector.ok()) {
        errors.push_back({"labels", selector.status().message()});
      } else if (!MergeFilter(selector->labels(), labels)) {
        return JsonResponse(200, {{"items", Json::array()}, {"next_cursor", nullptr}});
      }
    }
    if (!errors.empty()) return Invalid(errors);
    auto listed = jobs->List(p.project.id, labels, static_cast<int>(page.limit), page.after);
    if (!listed.ok()) return FieldProblem(listed.status(), "cursor");
    Json items = Json::array();
    for (const Job& job : listed->jobs) items.push_back(JobToJson(job));
    return JsonResponse(
        200,
        {{"items", std::move(items)},
         {"next_cursor", listed->next_cursor.empty() ? Json(nullptr) : Json(listed->next_cursor)}});
  }

  net::Response GetJob(net::Request& request, const Principal& p) {
    auto job = VisibleJob(request, p);
    if (!job.ok()) return Problem(job.status());
    Json body = JobToJson(*job);
    if (JobService* jobs = control_.jobs(); jobs != nullptr) {
      if (auto sync = jobs->SyncProgress(job->id)) {
        body["status"]["sync"] = LiveSyncToJson(*sync, control_.env().NowUnixMicros());
      }
    }
    return JsonResponse(200, body);
  }

  net::Response StopJob(net::Request& request, const Principal& p) {
    auto job = VisibleJob(request, p);
    if (!job.ok()) return Problem(job.status());
    auto stopped = control_.jobs()->Stop(p.project.id, job->id);
    if (!stopped.ok()) return Problem(stopped.status());
    return JsonResponse(202, JobToJson(*stopped));
  }

  net::Response DeleteJob(net::Request& request, const Principal& p) {
    auto job = VisibleJob(request, p);
    if (!job.ok()) return Problem(job.status());
    if (Status st = control_.jobs()->Delete(p.project.id, job->id); !st.ok()) return Problem(st);
    return net::Response::Empty(204);
  }

  net::Response PushJobData(net::Request& request, const Principal& p) {
    auto job = VisibleJob(request, p);
    if (!job.ok()) return Problem(job.status());
    if (Status st = control_.jobs()->PushData(p.project.id, job->id); !st.ok()) {
      return Problem(st);
    }
    return JsonResponse(200, {{"pushed", true}});
  }

  // The log from ?offset= (0): whole records as text/plain, `X-Sovai-Log-Offset` giving where to
  // continue. With ?follow=true the response stays open (chunked) and streams new records until
  // the job has ended and its log is read to the end.
  net::Response JobLogs(net::Request& request, const Principal& p) {
    auto job = VisibleJob(request, p);
    if (!job.ok()) return Problem(job.status());
    uint64_t offset = 0;
    if (auto bad = ParseLogOffset(request, &offset)) return *bad;
    const bool follow = request.query("follow").value_or("false") == "true";
    JobService* jobs = control_.jobs();
    const std::string project = p.project.id;
    const std::string id = job->id;
    auto first = jobs->ReadLog(project, id, offset, kMaxLogChunkBytes);
    if (!first.ok()) return FieldProblem(first.status(), "offset");
    if (!follow) {
      net::Response res = net::Response::Text(200, std::move(first->data));
      res.headers.Set("X-Sovai-Log-Offset", std::to_string(first->next_offset));
      return res;
    }
    return net::Response::Stream(
        200, "text/plain; charset=utf-8",
        [jobs, project, id, chunk = std::move(*first)](net::BodyWriter& out) mutable -> Status {
          for (;;) {
            if (!chunk.data.empty()) SOVAI_RETURN_IF_ERROR(out.Write(chunk.data));
            const uint64_t at = chunk.next_offset;
            // Read the state before the log: a job that ended has written its last record.
            auto now = jobs->Get(project, id);
            SOVAI_ASSIGN_OR_RETURN(chunk, jobs->ReadLog(project, id, at, kMaxLogChunkBytes));
            if (chunk.data.empty()) {
              if (!now.ok() || IsTerminal(now->state)) return Status();
              std::this_thread::sleep_for(kLogFollowPoll);
            }
          }
        });
  }

 private:
  // POST /v1/jobs?dry_run=true: the price and the budget's verdict; nothing is created.
  net::Response DryRunJob(net::Request& request, const Principal& p) {
    BillingService* billing = control_.billing();
    if (billing == nullptr) return Problem(NoBilling());
    auto spec = ReadSpec<JobSpec>(request, p, &billing->flavors(), ParseJobSpec);
    if (auto* answer = std::get_if<net::Response>(&spec)) return std::move(*answer);
    const JobSpec& job = std::get<JobSpec>(spec);
    return DryRunAnswer(job, billing->DryRunJob(p.project.id, job));
  }

  // The job of {id} when this token may see it; NotFound otherwise.
  base::Result<Job> VisibleJob(const net::Request& request, const Principal& p) {
    return Visible(request, p, control_.jobs(), "job");
  }
};

}  // namespace

std::span<const RestRoute> JobRoutes() {
  static constexpr RestRoute kRoutes[] = {
      {.method = "GET", .pattern = "/v1/info", .handler = Call<&JobApi::Info>},
      {.method = "POST",
       .pattern = "/v1/presign",
       .handler = Call<&JobApi::Presign>,
       .read_token_may_post = true},
      {.method = "GET", .pattern = "/v1/flavors", .handler = Call<&JobApi::ListFlavors>},
      {.method = "GET", .pattern = "/v1/jobs", .handler = Call<&JobApi::ListJobs>},
      {.method = "POST",
       .pattern = "/v1/jobs",
       .handler = Call<&JobApi::CreateJob>,
       .max_body_bytes = kMaxJobSpecBytes},
      {.method = "GET", .pattern = "/v1/jobs/{id}", .handler = Call<&JobApi::GetJob>},
      {.method = "DELETE", .pattern = "/v1/jobs/{id}", .handler = Call<&JobApi::DeleteJob>},
      {.method = "POST", .pattern = "/v1/jobs/{id}/stop", .handler = Call<&JobApi::StopJob>},
      {.method = "POST",
       .pattern = "/v1/jobs/{id}/push-data",
       .handler = Call<&JobApi::PushJobData>},
      {.method = "GET", .pattern = "/v1/jobs/{id}/logs", .handler = Call<&JobApi::JobLogs>},
  };
  return kRoutes;
}

}  // namespace sovai::control::rest
