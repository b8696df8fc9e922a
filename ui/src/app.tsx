import { useEffect, useState } from "preact/hooks";
import { loggedOut } from "./api/client";
import { LoginApproval } from "./components/LoginApproval";
import { LoginRequired } from "./components/LoginRequired";
import { Nav } from "./components/Nav";
import { StatusBar } from "./components/StatusBar";
import { view } from "./state/route";
import { start, statusError } from "./state/store";
import { ConnectView } from "./views/ConnectView";
import { KeysView } from "./views/KeysView";
import { LiveView } from "./views/LiveView";
import { PoolsView } from "./views/PoolsView";
import { SessionsView } from "./views/SessionsView";
import { UsageView } from "./views/UsageView";

const VIEWS = {
  live: LiveView,
  keys: KeysView,
  pools: PoolsView,
  sessions: SessionsView,
  usage: UsageView,
  connect: ConnectView,
};

/** The dashboard: the login screen without a session, else the status bar, the views and the nav. */
export function App() {
  const [ready, setReady] = useState<boolean | null>(null);
  useEffect(() => {
    start().then(setReady);
  }, []);
  if (loggedOut.value) return <LoginRequired />;
  if (ready === null) {
    return (
      <main class="loading" aria-busy="true">
        <p class="muted">Connecting to Keymux…</p>
      </main>
    );
  }
  if (!ready) {
    return (
      <main class="login">
        <div class="login-card">
          <h1>Keymux did not answer</h1>
          <p>{statusError.value ?? "The gateway could not be reached."}</p>
          <p class="muted">Check that Keymux is running, then reload this page.</p>
        </div>
      </main>
    );
  }
  const View = VIEWS[view.value];
  return (
    <div class="shell">
      <Nav />
      <div class="main-col">
        <StatusBar />
        <main class="content" id="content">
          <LoginApproval />
          <View />
        </main>
      </div>
    </div>
  );
}
