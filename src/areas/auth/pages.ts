import { html, layout, signedInPerson, type Html, type Page, type PageAnswer } from '../../http/pages';
import { peekInvite } from '../invites';
import { passkeySecondFactor, passkeySignIn } from './passkey-pages';
import { socialSignInLinks } from './social-pages';

/** What the sign-in page says for each `error` a flow sends it back with (SignInLocation). */
const FAILURES: Record<string, string> = {
  link_invalid: 'That sign-in link does not work: it was used already, or a newer one replaced it. Ask for a new one below.',
  link_expired: 'That sign-in link has expired. Ask for a new one below.',
  access_denied: 'Sign-in was cancelled.',
  invalid_state: 'That sign-in took too long or was started in another browser. Start again below.',
  provider_error: 'The sign-in provider answered with an error. Try again, or sign in another way.',
  email_unverified: 'The sign-in provider does not vouch for that email address. Sign in another way.',
  account_not_linked: 'An account with that email address exists but was never linked to this provider. Sign in with an emailed link instead.',
  sso_required: 'Your organization signs you in through its single sign-on.',
  not_provisioned: 'Your organization’s single sign-on does not let you in yet; ask an administrator.',
  account_suspended: 'This account is suspended.',
  invite_revoked: 'That invitation was revoked; ask for a new one.',
  invite_email_mismatch: 'That invitation is for another email address; sign in with that one.',
};

/** A `return_to` from the page's own URL, passed on as the request's (the API checks it again). */
function returnTo(query: URLSearchParams): string | null {
  const value = query.get('return_to');
  return value && value.startsWith('/') && value.length <= 2048 ? value : null;
}

/** GET /sign-in: an email for a link; what happened last, when a flow sent the person back. */
const signInPage: Page = ({ query }, deps) => {
  const sent = query.get('sent');
  const error = query.get('error');
  const next = returnTo(query);
  const content = html`<h1>Sign in</h1>
    ${sent ? html`<p class="notice" role="status">If ${sent} has an account, a sign-in link is on its way. It works once, for 15 minutes.</p>` : null}
    ${error ? html`<p class="error" role="alert">${FAILURES[error] ?? 'Sign-in did not work. Try again.'}</p>` : null}
    <form method="post" action="/auth/magic-link">
      <label for="email">Email address</label>
      <input id="email" name="email" type="email" autocomplete="email" required maxlength="254" ${sent ? null : html`autofocus`} />
      ${next ? html`<input type="hidden" name="return_to" value="${next}" />` : null}
      <button type="submit">Email me a sign-in link</button>
    </form>
    ${passkeySignIn(next)} ${socialSignInLinks(deps, next)}
    <p>New here? <a href="/sign-up">Create an account</a>.</p>`;
  return { html: layout('Sign in', content), scripts: true };
};

/** GET /sign-up: an email (and a name) for an activation link. */
const signUpPage: Page = ({ query }) => {
  const sent = query.get('sent');
  const next = returnTo(query);
  const content = html`<h1>Create an account</h1>
    ${sent ? html`<p class="notice" role="status">A link to finish is on its way to ${sent}, if it can use it. It works once, for 24 hours.</p>` : null}
    <form method="post" action="/auth/signup">
      <label for="email">Email address</label>
      <input id="email" name="email" type="email" autocomplete="email" required maxlength="254" />
      <label for="name">Your name (optional)</label>
      <input id="name" name="name" type="text" autocomplete="name" maxlength="200" />
      ${next ? html`<input type="hidden" name="return_to" value="${next}" />` : null}
      <button type="submit">Email me a link to finish</button>
    </form>
    <p>Have an account? <a href="/sign-in">Sign in</a>.</p>`;
  return { html: layout('Create an account', content) };
};

/** An emailed link's token from the page's URL, when it has the shape of one. */
function linkToken(query: URLSearchParams): string | null {
  const token = query.get('token');
  return token && /^[A-Za-z0-9_-]{20,200}$/.test(token) ? token : null;
}

/**
 * Where an emailed link lands. Mail scanners open links but do not press buttons, so only the
 * page's button (a POST of the token to `action`) uses the link up.
 */
function linkConfirmation(query: URLSearchParams, page: { title: string; heading: Html; text: Html; action: string; button: string }): PageAnswer {
  const token = linkToken(query);
  if (!token) return { redirect: '/sign-in?error=link_invalid' };
  const content = html`<h1>${page.heading}</h1>
    ${page.text}
    <form method="post" action="${page.action}">
      <input type="hidden" name="token" value="${token}" />
      <button type="submit" autofocus>${page.button}</button>
    </form>`;
  return { html: layout(page.title, content) };
}

/** GET /sign-up/confirm: only its button creates the account. */
const confirmSignUpPage: Page = ({ query }) =>
  linkConfirmation(query, {
    title: 'Confirm your account',
    heading: html`Create your account`,
    text: html`<p>Press the button to create your account and sign in on this device.</p>`,
    action: '/auth/signup/activate',
    button: 'Create account',
  });

/** GET /sign-in/confirm: only its button uses the link up and signs in. */
const confirmPage: Page = ({ query }) =>
  linkConfirmation(query, {
    title: 'Confirm sign-in',
    heading: html`Sign in`,
    text: html`<p>Press the button to finish signing in on this device.</p>`,
    action: '/auth/magic-link/verify',
    button: 'Sign in',
  });

const CODE_FAILURES: Record<string, string> = {
  verification_failed: 'That code did not work: it is wrong, or it was used already. Try the current one.',
  rate_limited: 'Too many wrong codes. Wait a few minutes, then try again.',
  conflict: 'There is no such code on this account. Use your authenticator app or a recovery code.',
  invalid_token: 'This sign-in has ended. Sign in again.',
  unauthenticated: 'This sign-in has ended. Sign in again.',
};

/**
 * GET /sign-in/second-factor: a signed-in person whose organization requires a second factor
 * shows a code from their authenticator app, or a recovery code.
 */
const secondFactorPage: Page = ({ query }) => {
  const error = query.get('error');
  const next = returnTo(query);
  const action = next ? `/auth/mfa/verify?${new URLSearchParams({ return_to: next }).toString()}` : '/auth/mfa/verify';
  const content = html`<h1>Second factor</h1>
    <p>Your organization asks for a second factor. Enter the code your authenticator app shows.</p>
    ${error ? html`<p class="error" role="alert">${CODE_FAILURES[error] ?? 'That did not work. Try again.'}</p>` : null}
    <form method="post" action="${action}">
      <input type="hidden" name="method" value="totp" />
      <label for="code">Code from the app</label>
      <input id="code" name="code" type="text" inputmode="numeric" autocomplete="one-time-code" pattern="[0-9]{6}" required autofocus />
      <button type="submit">Continue</button>
    </form>
    <form method="post" action="${action}">
      <input type="hidden" name="method" value="recovery_code" />
      <label for="recovery">Or a recovery code</label>
      <input id="recovery" name="code" type="text" autocomplete="off" pattern="[A-Za-z0-9]{5}-?[A-Za-z0-9]{5}" required />
      <button type="submit">Use recovery code</button>
    </form>
    ${passkeySecondFactor(next)}`;
  return { html: layout('Second factor', content), scripts: true };
};

/**
 * GET /invite/accept: where an invite link lands. Mail scanners open links but do not press
 * buttons, so only this page's button (a POST) accepts the invite.
 */
const invitePage: Page = async ({ query }, deps) => {
  const token = linkToken(query);
  if (!token) return { redirect: '/sign-in?error=link_invalid' };
  const invite = await peekInvite(deps.db, token);
  if (!invite.ok) return { redirect: `/sign-in?error=${invite.reason}` };
  const org = await deps.db.selectFrom('organizations').select('name').where('id', '=', invite.orgId).executeTakeFirst();
  return linkConfirmation(query, {
    title: 'Invitation',
    heading: html`Join ${org?.name ?? 'the organization'}`,
    text: html`<p>You were invited as <strong>${invite.email}</strong>.</p>`,
    action: '/auth/invite/activate',
    button: 'Accept the invitation',
  });
};

/**
 * GET /error: a plain page for a browser whose flow cannot go on, saying what happened
 * (`reason`, one of SignInLocation's) and where to go from here. Nothing of the URL but a known
 * reason is shown.
 */
const errorPage: Page = ({ query }) => {
  const reason = query.get('reason');
  const message = (reason && FAILURES[reason]) || 'Something went wrong on the way.';
  const content = html`<h1>That did not work</h1>
    <p role="alert">${message}</p>
    <p><a href="/sign-in">Go to the sign-in page</a> or <a href="/">the home page</a>.</p>`;
  return { html: layout('Error', content), status: reason && FAILURES[reason] ? 400 : 404 };
};

/** GET /: who is signed in, or the sign-in page. */
const homePage: Page = async (request, deps) => {
  const email = (await signedInPerson(request, deps))?.email;
  if (!email) return { redirect: '/sign-in' };
  return {
    html: layout(
      'Signed in',
      html`<h1>Signed in</h1>
        <p>You are signed in as <strong>${email}</strong>.</p>
        <form method="post" action="/auth/logout"><button type="submit">Log out</button></form>`,
    ),
  };
};

export const SIGN_IN_PAGES: Record<string, Page> = {
  '/': homePage,
  '/sign-in': signInPage,
  '/sign-in/confirm': confirmPage,
  '/sign-in/second-factor': secondFactorPage,
  '/sign-up': signUpPage,
  '/sign-up/confirm': confirmSignUpPage,
  '/invite/accept': invitePage,
  '/error': errorPage,
};
