/** Shown when the page has no dashboard session (never logged in, or it expired). */
export function LoginRequired() {
  return (
    <main class="login" data-testid="login-required">
      <div class="login-card">
        <div class="brand-mark" aria-hidden="true" />
        <h1>Log in to the Keymux dashboard</h1>
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
