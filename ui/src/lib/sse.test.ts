import { describe, expect, it } from "vitest";
import { SseParser } from "./sse";

describe("SseParser", () => {
  it("reads named events across chunk boundaries and skips comments and retry lines", () => {
    const parser = new SseParser();
    expect(parser.push("retry: 2000\n\n: keepalive\n\nid: 3\nevent: finis")).toEqual([]);
    expect(parser.push('hed\ndata: {"id":3}\n\nevent: lagged\r\ndata: {"missed":2}\r\n\r\n')).toEqual([
      { event: "finished", data: '{"id":3}' },
      { event: "lagged", data: '{"missed":2}' },
    ]);
  });

  it("joins multi-line data and names unnamed events message", () => {
    const parser = new SseParser();
    expect(parser.push("data: a\ndata:b\n\n")).toEqual([{ event: "message", data: "a\nb" }]);
  });
});
