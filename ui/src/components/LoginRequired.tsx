import { loginLink, rememberLogin } from "../lib/login";

/** Shown when the page has no dashboard session (never logged in, or it expired). */
export function LoginRequired() {
  // A client's browser login that landed here waits for a tab with a session (see lib/login.ts).
  const asked = loginLink(location.hash);
  rememberLogin(localStorage, asked, Date.now());
  return (
    <main class="login" data-testid="login-required">
      <div class="login-card">
        <div class="brand-mark" aria-hidden="true" />
        <h1>Log in to the Keymux dashboard</h1>
        {asked?.kind === "authorize" && (
          <p data-testid="login-kept">
            A client asks to log in to Keymux. Approve it in a dashboard that is logged in: it shows there now, or as
            soon as you open one with the command below. This tab can be closed.
          </p>
        )}
        <p>This page has no dashboard session. Open the dashboard with the login link: run</p>
        <pre class="code">
          <code>keymux dashboard --open</code>
        </pre>
        <p class="muted">
          A login link works once, for ten minutes. <code>keymux serve</code> prints one when it starts, and the tray's
          Open dashboard uses a fresh one.
        </p>
      </div>
    </main>
  );
}
