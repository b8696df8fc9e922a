// Shows why the gateway is not running: the tray app puts the reason in the address's fragment.
const reason = decodeURIComponent(window.location.hash.replace(/^#/, ""));
if (reason) document.getElementById("problem").textContent = reason;
