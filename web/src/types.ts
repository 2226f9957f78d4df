// The REST shapes the panel reads (docs/api/openapi.yaml, components/schemas). Only the members the
// panel uses are listed.

export type Role = "read" | "operator" | "admin";

export interface Whoami {
  user: { id: string; name: string; display_name: string };
  project: { id: string; name: string; system: boolean };
  role: Role;
  platform_admin: boolean;
  token: { id: string; name: string; expires_at: string | null; labels: string };
}

export interface Info {
  region: string;
  s3_url: string;
  version: string;
}

export interface Flavor {
  id: string;
  kind: "gpu" | "cpu";
  gpu_model: string;
  description: string;
  gpus_per_unit: number;
  vcpus_per_unit: number;
  memory_bytes_per_unit: number;
  max_units: number;
  price_per_minute_eur: string;
  available: boolean;
  reason: string;
}

export type JobState =
  | "QUEUED"
  | "INITIALIZING"
  | "PENDING"
  | "RUNNING"
  | "FINALIZING"
  | "DONE"
  | "FAILED"
  | "ERROR"
  | "INTERRUPTED"
  | "TIMEOUT";

export const TERMINAL_STATES: ReadonlySet<JobState> = new Set([
  "DONE",
  "FAILED",
  "ERROR",
  "INTERRUPTED",
  "TIMEOUT",
]);

export interface JobSpec {
  name?: string;
  image: string;
  command?: string[];
  flavor: string;
  units?: number;
  volumes?: string[];
  env?: Record<string, string>;
  labels?: Record<string, string>;
  timeout_s?: number;
}

export interface Job {
  id: string;
  project: string;
  user: string;
  spec: JobSpec;
  status: {
    state: JobState;
    reason: string;
    retries: number;
    history: { state: JobState; at_unix_micros: number; reason?: string }[];
    exit_code?: number;
    exit_signal?: number;
    sync?: LiveSync;
  };
  created_unix_micros: number;
}

// A job's (or notebook's) status.sync while its rw volumes sync live (docs/api/jobs.md).
export interface LiveSync {
  pending_files: number;
  pending_bytes: number;
  oldest_pending_age_s: number | null;
  last_sync_age_s?: number | null;
  uploaded_files: number;
  uploaded_bytes: number;
  units: number;
  last_error?: string;
}

export interface Page<T> {
  items: T[];
  next_cursor: string | null;
}

export interface DryRun {
  price_per_minute_eur: string;
  timeout_s: number;
  cost_at_timeout_eur: string;
  budget_left_eur: string | null;
  would_be_refused: boolean;
  reason: string;
}

export type AppState =
  | "QUEUED"
  | "INITIALIZING"
  | "RUNNING"
  | "SCALING"
  | "STOPPING"
  | "STOPPED"
  | "FAILED"
  | "DELETING"
  | "DELETED";

export interface Autoscaling {
  min_replicas: number;
  max_replicas: number;
  resource_type?: "REQUESTS" | "CPU" | "RAM";
  threshold?: number;
  cooldown_s?: number;
}

export interface AppSpec {
  name: string;
  model?: string;
  base_model?: string;
  image?: string;
  command?: string[];
  flavor: string;
  units?: number;
  replicas?: number;
  autoscaling?: Autoscaling;
  unsecure_http?: boolean;
  labels?: Record<string, string>;
  env?: Record<string, string>;
}

export interface App {
  id: string;
  name: string;
  project: string;
  state: AppState;
  reason: string;
  url: string;
  spec: AppSpec;
  adapter: boolean;
  generation: number;
  status: {
    desired_replicas: number;
    ready_replicas: number;
    usage?: { requests: number; prompt_tokens: number; completion_tokens: number };
    replicas: { job: string; state: string; ready: boolean; draining: boolean; generation: number }[];
    events: { at: string; what: string }[];
  };
  created_at: string;
}

export interface Endpoint {
  name: string;
  app: string;
  rate_limit: string;
  url: string;
  state?: string;
  ready_replicas?: number;
  created_at: string;
}

export type NotebookState = "STARTING" | "RUNNING" | "STOPPING" | "STOPPED" | "FAILED" | "ERROR" | "DELETING" | "DELETED";

export interface NotebookSpec {
  name?: string;
  editor?: string;
  image?: string | null;
  flavor: string;
  units?: number;
  volumes?: string[];
  labels?: Record<string, string>;
  env?: Record<string, string>;
  idle_timeout_s?: number;
}

export interface Notebook {
  id: string;
  name: string;
  state: NotebookState;
  reason: string;
  url: string;
  spec: NotebookSpec;
  image_digest?: string | null;
  events: { at: string; what: string }[];
  created_at: string;
  started_at?: string;
  last_activity_at?: string;
}

export interface BillingLine {
  project: string;
  kind: string;
  resource: string;
  flavor: string;
  units: number;
  start: string;
  end: string;
  open: boolean;
  minutes: number;
  quantity: number;
  amount_micro_eur: number;
  amount_eur: string;
}

export interface Usage {
  from: string;
  to: string;
  currency: string;
  groups: { key: string; amount_micro_eur: number; amount_eur: string; minutes: number; quantity: number }[];
  lines: BillingLine[];
  total_micro_eur: number;
  total_eur: string;
}

export interface Budget {
  monthly_cap_eur: string | null;
  alert_percent: number | null;
  spent_eur: string;
  spent_micro_eur: number;
  alert: boolean;
  capped: boolean;
}

export interface TcoScenario {
  utilisation_ppm: number;
  utilisation_percent: string;
  gpu_minutes_per_month: number;
  pay_as_you_go_cents: number;
  owning_cents: number;
  cheaper: "owning" | "pay-as-you-go";
  months_to_break_even: number | null;
}

export interface Tco {
  gpus: number;
  gpu_model: string;
  flavor: string | null;
  price_source: "catalog" | "flag";
  price_per_gpu_minute_micro_eur: number;
  owning: Record<string, number>;
  pay_as_you_go_full_cents: number;
  break_even_utilisation_ppm: number;
  break_even_utilisation_percent: string;
  assumed: TcoScenario;
  actual: TcoScenario | null;
  history_note: string;
  history_days: number;
  curves: { utilisation_ppm: number; owning_cents: number; pay_as_you_go_cents: number }[];
}

export interface AuditEntry {
  seq: number;
  at: string;
  actor_user: string;
  actor_token: string;
  project: string;
  action: string;
  resource: string;
  source: string;
  result: number;
  detail: string;
  hash: string;
}
