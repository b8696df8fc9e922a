// Server-Sent Events read from a fetch body, so the stream can carry the session header (an
// EventSource cannot send headers, and the dashboard's session lives in a header, not a cookie).

/** One event: its `event:` name and its `data:` text. */
export interface SseEvent {
  event: string;
  data: string;
}

/** Splits a stream's text into events, keeping an unfinished tail for the next chunk. */
export class SseParser {
  private buffer = "";

  /** The events completed by `chunk`; comments and events without data are left out. */
  push(chunk: string): SseEvent[] {
    this.buffer += chunk.replace(/\r\n?/g, "\n");
    const out: SseEvent[] = [];
    let end = this.buffer.indexOf("\n\n");
    while (end !== -1) {
      const frame = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end + 2);
      const parsed = parseFrame(frame);
      if (parsed) out.push(parsed);
      end = this.buffer.indexOf("\n\n");
    }
    return out;
  }
}

function parseFrame(frame: string): SseEvent | null {
  let event = "message";
  const data: string[] = [];
  for (const line of frame.split("\n")) {
    if (line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    const value = colon === -1 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") event = value;
    if (field === "data") data.push(value);
  }
  return data.length ? { event, data: data.join("\n") } : null;
}
