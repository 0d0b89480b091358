// The admin UI's shell: sign-in, the page router (#/keys …) and the navigation.
//
// Signed out, only the sign-in form exists: no page is built and no admin call is made until
// the master key has been checked against the admin API.

import { ApiError, signIn, signOut, signedIn, whenSignedOut } from "./api.js";
import { announce, el, replace } from "./dom.js";
import * as keys from "./pages/keys.js";
import * as logs from "./pages/logs.js";
import * as mcp from "./pages/mcp.js";
import * as models from "./pages/models.js";
import * as overview from "./pages/overview.js";
import * as requests from "./pages/requests.js";
import * as spend from "./pages/spend.js";
import * as teams from "./pages/teams.js";

const PAGES = { overview, keys, teams, spend, logs, requests, models, mcp };
const TITLES = { overview: "Overview", keys: "Keys", teams: "Teams", spend: "Spend", logs: "Request log", requests: "Kept requests", models: "Models", mcp: "MCP" };

const signInSection = document.getElementById("sign-in");
const signInForm = document.getElementById("sign-in-form");
const signInError = document.getElementById("sign-in-error");
const keyInput = document.getElementById("master-key");
const bar = document.getElementById("bar");
const page = document.getElementById("page");
let leave = null; // the current page's cleanup (timers), if any
let routed = 0; // how many renders route() has begun: only the latest one's page stays

function showSignIn() {
  if (leave) leave();
  leave = null;
  bar.hidden = true;
  page.hidden = true;
  page.replaceChildren();
  signInSection.hidden = false;
  document.title = "Sign in · Crossway admin";
  keyInput.focus();
}

async function route() {
  if (!signedIn()) return showSignIn();
  signInSection.hidden = true;
  bar.hidden = false;
  page.hidden = false;
  const [name, ...rest] = window.location.hash.replace(/^#\/?/, "").split("/");
  const current = PAGES[name] ? name : "overview";
  if (!PAGES[name]) { window.history.replaceState(null, "", "#/overview"); }
  for (const link of document.querySelectorAll("#nav a")) {
    if (link.getAttribute("href") === `#/${current}`) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (leave) leave();
  leave = null;
  const render = ++routed;
  document.title = `${TITLES[current]} · Crossway admin`;
  const root = el("section", { "aria-labelledby": "page-title" }, el("h1", { id: "page-title", text: TITLES[current] }));
  replace(page, root);
  try {
    const cleanup = (await PAGES[current].render(root, rest.map(decodeURIComponent))) || null;
    if (render !== routed) { // another page was routed to while this one loaded: it is gone
      if (cleanup) cleanup();
      return undefined;
    }
    leave = cleanup;
  } catch (error) {
    if (!signedIn() || render !== routed) return undefined;
    root.append(el("p", { class: "error", role: "alert", text: `Could not load this page: ${error.message}` }));
  }
  announce(`${TITLES[current]} loaded`);
  return undefined;
}

signInForm.addEventListener("submit", async (event) => {
  event.preventDefault();
  signInError.hidden = true;
  const key = keyInput.value.trim();
  try {
    await signIn(key);
  } catch (error) {
    signInError.textContent = error instanceof ApiError && error.status === 401
      ? "That is not the master key (or the admin API is off: set auth.master_key)."
      : `Cannot reach the admin API: ${error.message}`;
    signInError.hidden = false;
    keyInput.select();
    return;
  }
  keyInput.value = "";
  // Set without a hashchange event, whose handler would route (and render) a second time.
  if (!window.location.hash || window.location.hash === "#/") window.history.replaceState(null, "", "#/overview");
  await route();
  document.getElementById("main").focus();
});

document.getElementById("sign-out").addEventListener("click", () => signOut());
whenSignedOut(showSignIn);
window.addEventListener("hashchange", route);
route();
