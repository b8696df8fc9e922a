import { useEffect, useState } from "preact/hooks";
import { ApiError, get, messageOf, post } from "../api/client";
import type { Client, ClientSetup, SetupDone, SetupPreview, SetupRequest, SetupUndone } from "../api/types";
import { remedyOf, setupLabel } from "../lib/setup";
import { refreshStatus } from "../state/store";
import { Tag } from "./Badge";
import { Notice } from "./Notice";

type Step =
  | { kind: "idle" }
  | { kind: "refused"; message: string; remedy: "custom_provider" | "force" | null }
  | { kind: "preview"; preview: SetupPreview }
  | { kind: "done"; text: string; ok: boolean };

/**
 * Sets one client (Codex or pi) up in its own config file, through the same flow as `keymux setup`:
 * a preview of every file's change first, the person's choices (import the key Codex's auth.json holds,
 * or the one choice a refusal names), then Apply, which the gateway refuses if a file changed since the
 * preview. Undo takes Keymux's change back.
 */
export function SetupClient({ client }: { client: Client }) {
  const [state, setState] = useState<ClientSetup | null>(null);
  const [request, setRequest] = useState<SetupRequest>({ custom_provider: false, force: false, import_label: null, login: false });
  const [importKey, setImportKey] = useState(true);
  const [login, setLogin] = useState(false);
  const [label, setLabel] = useState(client === "codex" ? "codex" : "pi");
  const [step, setStep] = useState<Step>({ kind: "idle" });
  const [busy, setBusy] = useState(false);

  const load = async () => {
    const all = await get<ClientSetup[]>("setup");
    setState(all.find((c) => c.client === client) ?? null);
  };
  useEffect(() => {
    load().catch(() => setState(null));
  }, [client]);

  const run = async (work: () => Promise<void>) => {
    setBusy(true);
    try {
      await work();
    } finally {
      setBusy(false);
    }
  };

  const preview = (wanted: SetupRequest) =>
    run(async () => {
      setRequest(wanted);
      try {
        const shown = await post<SetupPreview>(`setup/${client}/preview`, wanted);
        setStep(shown.changes_anything ? { kind: "preview", preview: shown } : { kind: "done", ok: true, text: `${setupLabel(client)} already uses this Keymux.` });
      } catch (e) {
        const remedy = e instanceof ApiError ? remedyOf(e.code) : null;
        setStep({ kind: "refused", message: messageOf(e), remedy });
      }
    });

  const apply = (shown: SetupPreview) =>
    run(async () => {
      try {
        const done = await post<SetupDone>(`setup/${client}/confirm/${shown.id}`);
        const notes = done.files.flatMap((f) => f.notes.map((n) => `${f.path}: ${n}.`));
        setStep({ kind: "done", ok: true, text: [done.message, ...notes].join(" ") });
        await Promise.all([load(), refreshStatus()]);
      } catch (e) {
        setStep({ kind: "done", ok: false, text: messageOf(e) });
      }
    });

  // Changing the import choice makes a new preview: the yes always goes to what is on screen.
  const chooseImport = (on: boolean, name: string) => {
    setImportKey(on);
    setLabel(name);
    void preview({ ...request, import_label: on && name.trim() !== "" ? name.trim() : null });
  };

  const undo = () =>
    run(async () => {
      try {
        const undone = await post<SetupUndone>(`setup/${client}/undo`, { force: false });
        setStep({ kind: "done", ok: true, text: [`${undone.path} is back as it was.`, ...undone.notes].join(" ") });
        await load();
      } catch (e) {
        setStep({ kind: "done", ok: false, text: messageOf(e) });
      }
    });

  const file = state?.file ?? (client === "codex" ? "~/.codex/config.toml" : "~/.pi/agent/models.json");
  return (
    <div class="setup-client" data-testid={`setup-${client}`}>
      <div class="card-head">
        <h2>
          Set up {setupLabel(client)} <span class="muted small">{file}</span>
        </h2>
        <Tag tone={state?.set_up ? "ok" : "muted"}>
          <span data-testid={`setup-${client}-state`}>{state?.set_up ? (state.edited_since ? "set up · edited since" : "set up") : "not set up"}</span>
        </Tag>
      </div>
      <p class="muted small">
        {client === "codex"
          ? "Points Codex's own provider at Keymux with one line, so your sessions from before Keymux stay listed and continue. Each file is backed up; Undo takes out only what Keymux added."
          : "Adds a Keymux provider to pi's models.json, keeping every other provider. The file is backed up; Undo puts it back."}
      </p>
      {client === "codex" && (
        <label class="check small">
          <input type="checkbox" checked={login} onChange={(e) => setLogin(e.currentTarget.checked)} data-testid="setup-codex-login" />
          Log in instead of keeping a token in Codex's files (Codex 0.171 or later): Codex opens this dashboard to ask, and you pick its pool
        </label>
      )}
      <div class="actions start">
        <button type="button" class="button primary" disabled={busy} onClick={() => preview({ custom_provider: false, force: false, import_label: client === "codex" && importKey && !login ? label : null, login: client === "codex" && login })} data-testid={`setup-${client}-preview`}>
          Preview changes
        </button>
        {state?.set_up && (
          <button type="button" class="button ghost" disabled={busy} onClick={undo} data-testid={`setup-${client}-undo`}>
            Undo
          </button>
        )}
      </div>
      {step.kind === "refused" && (
        <div data-testid={`setup-${client}-refused`}>
          <Notice kind="error">{step.message}</Notice>
          {step.remedy && (
            <div class="actions start">
              <button
                type="button"
                class="button"
                disabled={busy}
                onClick={() => preview({ ...request, custom_provider: request.custom_provider || step.remedy === "custom_provider", force: request.force || step.remedy === "force" })}
                data-testid={`setup-${client}-remedy`}
              >
                {step.remedy === "force" ? "Point it at Keymux anyway" : "Use Keymux's own provider"}
              </button>
            </div>
          )}
        </div>
      )}
      {step.kind === "preview" && (
        <div class="setup-preview" data-testid={`setup-${client}-diff`}>
          {step.preview.files.map((f) => (
            <div key={f.path}>
              <p class="small">
                <code>{f.path}</code>
              </p>
              <pre class="code small">{f.diff}</pre>
              {f.notes.map((n) => (
                <p key={n} class="muted small">
                  {n}
                </p>
              ))}
            </div>
          ))}
          {step.preview.makes_token && <p class="muted small">A client token of its own is made when you apply; the preview shows a stand-in.</p>}
          {step.preview.finds_api_key && (
            <div class="import-choice">
              <label class="check">
                <input type="checkbox" checked={importKey} disabled={busy} onChange={(e) => chooseImport(e.currentTarget.checked, label)} data-testid={`setup-${client}-import`} />
                <span>Import the API key from auth.json into Keymux's keys (keychain) as</span>
              </label>
              <input class="label-input" value={label} maxLength={64} disabled={busy || !importKey} onChange={(e) => chooseImport(importKey, e.currentTarget.value)} aria-label="Label for the imported key" />
            </div>
          )}
          <div class="actions start">
            <button type="button" class="button primary" disabled={busy} onClick={() => apply(step.preview)} data-testid={`setup-${client}-apply`}>
              Apply
            </button>
            <button type="button" class="button ghost" disabled={busy} onClick={() => setStep({ kind: "idle" })}>
              Cancel
            </button>
          </div>
        </div>
      )}
      {step.kind === "done" && (
        <div data-testid={`setup-${client}-result`}>
          <Notice kind={step.ok ? "ok" : "error"}>{step.text}</Notice>
        </div>
      )}
    </div>
  );
}
