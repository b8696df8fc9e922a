import { logout } from "../api/client";
import { VIEWS, view } from "../state/route";

/** The views; a sidebar on wide screens, a compact top bar in a tray-sized window. */
export function Nav() {
  return (
    <nav class="nav" aria-label="Views">
      <a class="brand" href="#/live" aria-label="Keymux">
        <span class="brand-mark" aria-hidden="true" />
        <span class="brand-name">Keymux</span>
      </a>
      <ul>
        {VIEWS.map((v) => (
          <li key={v.id}>
            <a href={`#/${v.id}`} aria-current={view.value === v.id ? "page" : undefined} data-testid={`nav-${v.id}`}>
              {v.title}
            </a>
          </li>
        ))}
        <li>
          <a
            href="#/live"
            role="button"
            data-testid="logout"
            onClick={(e) => {
              e.preventDefault();
              // Reloaded, the page starts with no session and nothing left open.
              void logout().finally(() => location.reload());
            }}
          >
            Log out
          </a>
        </li>
      </ul>
    </nav>
  );
}
