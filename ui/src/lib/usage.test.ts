import { describe, expect, it } from "vitest";
import type { UsagePoint } from "../api/types";
import { usageCsv } from "./usage";

function point(start: number, key: string, over: Partial<UsagePoint> = {}): UsagePoint {
  return {
    start_unix_ms: start,
    key,
    requests: 2,
    by_status: {},
    by_affinity: {},
    failures: { rate_limited: 1, upstream_5xx: 2 },
    pinned: 0,
    continuity: 0,
    rescued: 0,
    reasoning_dropped: 0,
    reasoning_misplaced: 0,
    input_tokens: 100,
    cached_tokens: 40,
    output_tokens: 7,
    cached_ratio: 0.4,
    spend_usd: 0.000123,
    unpriced_requests: 1,
    latency_p50_ms: null,
    latency_p90_ms: null,
    latency_p99_ms: null,
    ...over,
  };
}

describe("usageCsv", () => {
  it("writes a header and one line per bucket and key, in time order, with labels and sums", () => {
    const name = (fp: string) => (fp === "fp1" ? 'work, "main"' : fp);
    const csv = usageCsv([point(3_600_000, "total"), point(0, "fp1")], name);
    expect(csv).toBe(
      "start,key,requests,input_tokens,cached_tokens,output_tokens,spend_usd,unpriced_requests,failed_attempts\n" +
        '1970-01-01T00:00:00.000Z,"work, ""main""",2,100,40,7,0.000123,1,3\n' +
        "1970-01-01T01:00:00.000Z,total,2,100,40,7,0.000123,1,3\n",
    );
  });
});
