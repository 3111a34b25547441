import { html, layout, signedInPerson, type Html, type Page } from '../../http/pages';

export const PASSKEYS_SCRIPT_PATH = '/assets/passkeys.js';

/**
 * The only script the web app's pages load: WebAuthn is a browser API with no form to post.
 * It uses the Level 3 JSON helpers (`parseCreationOptionsFromJSON`,
 * `parseRequestOptionsFromJSON`, `toJSON()`), which current browsers have, so no bundle. It
 * acts on elements marked `data-passkey`, and says what went wrong in the page's alert.
 */
const SCRIPT = `'use strict';
(() => {
  const alertBox = document.getElementById('passkey-error');
  const say = (text) => { if (alertBox) { alertBox.textContent = text; alertBox.hidden = false; } };
  const post = async (path, body, method = 'POST') => {
    const res = await fetch(path, {
      method,
      credentials: 'same-origin',
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const data = res.status === 204 ? null : await res.json().catch(() => null);
    return { status: res.status, data };
  };
  const supported = () => typeof PublicKeyCredential !== 'undefined' && typeof PublicKeyCredential.parseRequestOptionsFromJSON === 'function';
  const assertion = async (options) => {
    const credential = await navigator.credentials.get({ publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(options) });
    return credential.toJSON();
  };
  const failed = (res, what) => say((res.data && res.data.detail) || what + ' did not work; try again.');

  /** A fresh second factor before changing factors: the passkey, or else a code from the app. */
  async function stepUp() {
    const begun = await post('/auth/step-up/options');
    if (begun.status !== 200) return failed(begun, 'The check'), false;
    let proof;
    if (begun.data.passkey_options) proof = { method: 'passkey', credential: await assertion(begun.data.passkey_options) };
    else {
      const code = window.prompt('Enter the code from your authenticator app');
      if (!code) return false;
      proof = { method: 'totp', code: code.trim() };
    }
    const done = await post('/auth/step-up/verify', proof);
    if (done.status !== 200) return failed(done, 'The check'), false;
    return true;
  }
  /** Runs a change; when it needs a step-up, steps up and runs it once more. */
  async function withStepUp(change) {
    let res = await change();
    if (res.status === 403 && res.data && res.data.code === 'step_up_required') {
      if (!(await stepUp())) return null;
      res = await change();
    }
    return res;
  }

  const handlers = {
    async 'sign-in'(button) {
      const options = await post('/auth/passkey/authentication/options');
      if (options.status !== 200) return failed(options, 'Signing in with a passkey');
      const res = await post('/auth/passkey/authentication/verify', {
        credential: await assertion(options.data),
        ...(button.dataset.returnTo ? { return_to: button.dataset.returnTo } : {}),
      });
      if (res.status !== 200) return failed(res, 'Signing in with a passkey');
      window.location.assign(res.data.redirect_to);
    },
    async 'second-factor'(button) {
      const options = await post('/auth/passkey/authentication/options');
      if (options.status !== 200) return failed(options, 'The passkey');
      const res = await post('/auth/mfa/verify', { method: 'passkey', credential: await assertion(options.data) });
      if (res.status !== 200) return failed(res, 'The passkey');
      // Only a path of this site: the page's return_to came from a link anyone could craft.
      const next = new URL(button.dataset.returnTo || '/', window.location.origin);
      window.location.assign(next.origin === window.location.origin ? next.href : '/');
    },
    async add() {
      const options = await withStepUp(() => post('/auth/passkey/registration/options'));
      if (!options) return;
      if (options.status !== 200) return failed(options, 'Adding a passkey');
      const credential = await navigator.credentials.create({ publicKey: PublicKeyCredential.parseCreationOptionsFromJSON(options.data) });
      const res = await post('/auth/passkey/registration/verify', { credential: credential.toJSON() });
      if (res.status !== 201) return failed(res, 'Adding a passkey');
      window.location.reload();
    },
    async rename(button) {
      const input = document.getElementById('name-' + button.dataset.id);
      const res = await post('/auth/passkey/' + encodeURIComponent(button.dataset.id), { name: input.value.trim() }, 'PATCH');
      if (res.status !== 200) return failed(res, 'Renaming the passkey');
      window.location.reload();
    },
    async delete(button) {
      if (!window.confirm('Delete the passkey "' + button.dataset.name + '"? It will no longer sign you in.')) return;
      const res = await withStepUp(() => post('/auth/passkey/' + encodeURIComponent(button.dataset.id), undefined, 'DELETE'));
      if (!res) return;
      if (res.status !== 204) return failed(res, 'Deleting the passkey');
      window.location.reload();
    },
  };

  const show = (id, visible) => { const el = document.getElementById(id); if (el) el.hidden = !visible; };
  const showCodes = (codes) => {
    const list = document.getElementById('recovery-codes');
    list.replaceChildren(...codes.map((code) => { const li = document.createElement('li'); li.textContent = code; return li; }));
    show('recovery', true);
  };
  /** The authenticator app: set up (secret, then a code to confirm), new recovery codes, turn off. */
  const totp = {
    async begin() {
      const res = await withStepUp(() => post('/user/me/mfa/totp'));
      if (!res) return;
      if (res.status !== 200) return failed(res, 'Setting up the app');
      document.getElementById('totp-secret').textContent = res.data.secret;
      const link = document.getElementById('totp-uri');
      link.href = res.data.otpauth_uri;
      show('totp-setup', true);
      document.getElementById('totp-code').focus();
    },
    async confirm() {
      const code = document.getElementById('totp-code').value.trim();
      const res = await post('/user/me/mfa/totp/verify', { code });
      if (res.status !== 200) return failed(res, 'Confirming the code');
      show('totp-setup', false);
      show('totp-begin-row', false);
      showCodes(res.data.recovery_codes);
    },
    async regenerate() {
      const res = await withStepUp(() => post('/user/me/mfa/recovery-codes/regenerate'));
      if (!res) return;
      if (res.status !== 200) return failed(res, 'Making new recovery codes');
      showCodes(res.data.recovery_codes);
    },
    async off() {
      if (!window.confirm('Turn off the authenticator app? Its recovery codes stop working too.')) return;
      const res = await withStepUp(() => post('/user/me/mfa/totp', undefined, 'DELETE'));
      if (!res) return;
      if (res.status !== 204) return failed(res, 'Turning the app off');
      window.location.reload();
    },
  };
  for (const button of document.querySelectorAll('[data-totp]')) {
    button.hidden = false;
    button.addEventListener('click', (event) => {
      event.preventDefault();
      if (alertBox) alertBox.hidden = true;
      totp[button.dataset.totp]().catch((err) => say('That did not work: ' + (err && err.message)));
    });
  }

  for (const button of document.querySelectorAll('[data-passkey]')) {
    if (!supported()) { button.disabled = true; continue; }
    button.hidden = false;
    button.addEventListener('click', (event) => {
      event.preventDefault();
      if (alertBox) alertBox.hidden = true;
      handlers[button.dataset.passkey](button).catch((err) => say(err && err.name === 'NotAllowedError' ? 'The passkey request was cancelled or timed out.' : 'That did not work: ' + (err && err.message)));
    });
  }
})();
`;

/** The sign-in page's passkey button (shown once the script finds WebAuthn), and its script. */
export function passkeySignIn(returnTo: string | null): Html {
  return html`<p class="error" role="alert" id="passkey-error" hidden></p>
    <button type="button" data-passkey="sign-in" ${returnTo ? html`data-return-to="${returnTo}"` : null} hidden>Sign in with a passkey</button>
    <script src="${PASSKEYS_SCRIPT_PATH}" defer></script>`;
}

/** The second-factor page's passkey button, for a person whose session owes its second factor. */
export function passkeySecondFactor(returnTo: string | null): Html {
  return html`<p class="error" role="alert" id="passkey-error" hidden></p>
    <button type="button" data-passkey="second-factor" ${returnTo ? html`data-return-to="${returnTo}"` : null} hidden>Use a passkey</button>
    <script src="${PASSKEYS_SCRIPT_PATH}" defer></script>`;
}

const day = (d: Date) => d.toISOString().slice(0, 10);

/**
 * GET /account/security: the person's passkeys (rename, delete, add) and authenticator app
 * (set up, new recovery codes, turn off). Changes ask for a step-up first once the person
 * holds a factor; the script does it with a passkey, or a code from the app.
 */
const securityPage: Page = async (request, deps) => {
  const me = await signedInPerson(request, deps);
  if (!me) return { redirect: `/sign-in?${new URLSearchParams({ return_to: '/account/security' }).toString()}` };
  const passkeys = await deps.db
    .selectFrom('passkeys')
    .select(['id', 'name', 'authenticator_name', 'backed_up', 'created_at', 'last_used_at'])
    .where('user_id', '=', me.userId)
    .orderBy('id')
    .execute();
  const totp = await deps.db.selectFrom('users').select('totp_enabled_at').where('id', '=', me.userId).executeTakeFirstOrThrow();
  const codes = await deps.db
    .selectFrom('recovery_codes')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('user_id', '=', me.userId)
    .where('used_at', 'is', null)
    .executeTakeFirstOrThrow();
  const codesLeft = Number(codes.n);
  const rows = passkeys.map(
    (p) =>
      html`<li>
        <label for="name-${p.id}">Name</label>
        <input id="name-${p.id}" type="text" value="${p.name}" maxlength="100" required />
        <p>
          ${p.authenticator_name ?? 'Passkey'}${p.backed_up ? ' · synced' : ''} · added ${day(p.created_at)} ·
          ${p.last_used_at ? `last used ${day(p.last_used_at)}` : 'never used'}
        </p>
        <button type="button" data-passkey="rename" data-id="${p.id}" hidden>Rename</button>
        <button type="button" data-passkey="delete" data-id="${p.id}" data-name="${p.name}" hidden>Delete ${p.name}</button>
      </li>`,
  );
  const content = html`<h1>Security</h1>
    <p>Signed in as <strong>${me.email}</strong>.</p>
    <h2>Passkeys</h2>
    <p class="error" role="alert" id="passkey-error" hidden></p>
    ${
      passkeys.length > 0
        ? html`<ul aria-label="Your passkeys">
            ${rows}
          </ul>`
        : html`<p>You have no passkey yet.</p>`
    }
    <button type="button" data-passkey="add" hidden>Add a passkey</button>
    <h2>Authenticator app</h2>
    ${
      totp.totp_enabled_at
        ? html`<p>On since ${day(totp.totp_enabled_at)} · ${String(codesLeft)} recovery codes left.</p>
            <button type="button" data-totp="regenerate" hidden>New recovery codes</button>
            <button type="button" data-totp="off" hidden>Turn off the app</button>`
        : html`<p id="totp-begin-row">Not set up. <button type="button" data-totp="begin" hidden>Set up an authenticator app</button></p>
            <div id="totp-setup" hidden>
              <p>Add this secret to your authenticator app: <code id="totp-secret"></code> (or <a id="totp-uri" href="#">open it in the app</a>).</p>
              <label for="totp-code">Code from the app</label>
              <input id="totp-code" type="text" inputmode="numeric" autocomplete="one-time-code" pattern="[0-9]{6}" />
              <button type="button" data-totp="confirm" hidden>Turn on</button>
            </div>`
    }
    <div id="recovery" hidden>
      <h2>Recovery codes</h2>
      <p>Keep them somewhere safe: each signs you in once if you lose your devices, and they are shown only now.</p>
      <ul id="recovery-codes" aria-label="Recovery codes"></ul>
    </div>
    <noscript><p>Passkeys and the authenticator app need JavaScript in this browser.</p></noscript>
    <script src="${PASSKEYS_SCRIPT_PATH}" defer></script>`;
  return { html: layout('Security', content), scripts: true };
};

export const PASSKEY_PAGES: Record<string, Page> = {
  '/account/security': securityPage,
  [PASSKEYS_SCRIPT_PATH]: () => ({ javascript: SCRIPT }),
};
