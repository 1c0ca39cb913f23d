// A parser of server-sent events (`text/event-stream`), as the WHATWG HTML
// standard defines it ("Interpreting an event stream"), for the event
// stream of `GET /v1/events`. No dependency: text in, messages out.

/** One message of an event stream. */
export interface SseMessage {
  /** The message's `event:` (`message` when it named none). */
  event: string;
  /** Its `data:` lines, joined by newlines. */
  data: string;
  /** The last `id:` the stream set, at or before this message (`undefined` while none was set). */
  id: string | undefined;
}

/**
 * Splits decoded text into messages: feed it chunks as they come with {@link SseParser.push}, which answers
 * the messages they completed. Comment lines (`:` first) are dropped, `retry:` is read into
 * {@link SseParser.retryMs}, unknown fields are ignored, and a message without data is not dispatched.
 * A message still incomplete when the stream ends is never answered (the standard says so too).
 */
export class SseParser {
  /** The reconnection time the stream asked for with `retry:`, if any. */
  retryMs: number | undefined;
  #line = "";
  #afterCr = false;
  #event = "";
  #data: string[] = [];
  #id: string | undefined;

  /** Feeds text; answers the messages it completed, in order. */
  push(text: string): SseMessage[] {
    const out: SseMessage[] = [];
    let start = 0;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (c !== 10 && c !== 13) continue;
      if (c === 10 && this.#afterCr && i === start && this.#line === "") {
        // The \n of a \r\n whose \r ended the previous chunk (or line).
        this.#afterCr = false;
        start = i + 1;
        continue;
      }
      this.#lineDone(this.#line + text.slice(start, i), out);
      this.#line = "";
      this.#afterCr = c === 13;
      start = i + 1;
    }
    if (start < text.length) {
      this.#line += text.slice(start);
      this.#afterCr = false;
    }
    return out;
  }

  #lineDone(line: string, out: SseMessage[]) {
    if (line === "") {
      if (this.#data.length > 0) out.push({ event: this.#event || "message", data: this.#data.join("\n"), id: this.#id });
      this.#data = [];
      this.#event = "";
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    switch (field) {
      case "event":
        this.#event = value;
        break;
      case "data":
        this.#data.push(value);
        break;
      case "id":
        if (!value.includes("\0")) this.#id = value;
        break;
      case "retry":
        if (/^[0-9]+$/.test(value)) this.retryMs = Number(value);
        break;
      default:
        break;
    }
  }
}
