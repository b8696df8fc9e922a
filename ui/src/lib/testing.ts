// Builders the component tests share: API values with sensible defaults, overridden per test.
import type { Decision } from "../api/types";

export function decision(over: Partial<Decision> = {}): Decision {
  return {
    seq: 1,
    choice: "k_a1",
    fallbacks: [],
    reasons: [],
    affinity_source: "none",
    affinity_state: "no_signal",
    continuity_hit: false,
    pin: null,
    rescued_orgs: [],
    refusal: null,
    route: "balanced",
    ...over,
  };
}
