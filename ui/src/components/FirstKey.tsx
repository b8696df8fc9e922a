import { AddKeyForm } from "./AddKeyForm";
import { ImportKeys } from "./ImportKeys";

/** The first screen while the pool is empty: how to add a key, here or from the command line. */
export function FirstKey() {
  return (
    <section class="view first-key" data-testid="empty-state">
      <header class="view-head">
        <h1>Add your first key</h1>
      </header>
      <p>
        Keymux has no API keys yet, so it cannot serve requests. Add one here, or from a terminal:
      </p>
      <pre class="code">
        <code>keymux keys add --label work</code>
      </pre>
      <p class="muted">
        The key goes to the OS keychain; Keymux asks the provider once (a free call) to learn its organization and
        check it works. Add keys of several organizations and Keymux spreads the load without breaking a conversation.
      </p>
      <ImportKeys firstRun />
      <div class="card">
        <AddKeyForm />
      </div>
    </section>
  );
}
