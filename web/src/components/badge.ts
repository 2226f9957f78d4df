// A state badge: the state's name (never color alone) with a class per state group.
import { h } from "../dom";

const GROUP: Record<string, string> = {
  QUEUED: "wait",
  INITIALIZING: "busy",
  PENDING: "busy",
  RUNNING: "run",
  FINALIZING: "busy",
  DONE: "ok",
  FAILED: "bad",
  ERROR: "bad",
  INTERRUPTED: "off",
  TIMEOUT: "bad",
  // Apps and notebooks.
  STARTING: "busy",
  SCALING: "busy",
  STOPPING: "busy",
  STOPPED: "off",
  DELETING: "off",
  DELETED: "off",
};

export function stateBadge(state: string): HTMLElement {
  return h("span", { class: `badge ${GROUP[state] ?? "off"}`, "data-state": state }, state);
}
