// The rules of the credential cache that no request can time on purpose: an answer looked up
// before a change is not remembered after it, and nothing is remembered while changes could
// go unheard. An authenticator of this file's own stands in for an area's.
import pino from 'pino';
import { CredentialCache } from '../../src/identity/credential-cache';
import type { Authenticator, Caller } from '../../src/identity/credentials';
import type { DatabaseHandle, Db } from '../../src/db/database';

const db = {} as Db;
const credential = { scheme: 'bearer' as const, secret: 'xyz_1' };
const caller: Caller = {
  kind: 'scim_token',
  userId: null,
  tokenId: 'stk_1',
  orgId: 'org_1',
  access: { orgId: 'org_1', requireMfa: false, permissions: new Set() },
};

/** Counts lookups; `gate` (when set) holds a lookup until released. */
function countingAuthenticator(cacheable = true) {
  const state = { lookups: 0, gate: null as Promise<void> | null };
  const authenticator: Authenticator = {
    describes: 'a test credential',
    howToSend: 'send one',
    recognizes: () => true,
    async authenticate() {
      state.lookups++;
      if (state.gate) await state.gate;
      return { status: 'ok', caller };
    },
    ...(cacheable ? { cache: { recordUse: () => undefined } } : {}),
  };
  return { authenticator, state };
}

/** A listen function driven by the test: `notify()` and `lose()` play the database's part. */
function channel() {
  let onNotify: (payload: string) => void = () => {};
  let onLost: (() => void) | undefined;
  const listen: DatabaseHandle['listen'] = async (_name, notify, lost) => {
    onNotify = notify;
    onLost = lost;
    notify('');
    return async () => undefined;
  };
  return { listen, notify: (payload = 'credentials') => onNotify(payload), lose: () => onLost?.() };
}

const silent = pino({ level: 'silent' });

it('remembers nothing before it listens, then remembers, and forgets on a notification', async () => {
  const cache = new CredentialCache();
  const { authenticator, state } = countingAuthenticator();
  await cache.authenticate(authenticator, credential, db);
  await cache.authenticate(authenticator, credential, db);
  expect(state.lookups).toBe(2);
  const events = channel();
  await cache.follow(events.listen, silent);
  await cache.authenticate(authenticator, credential, db);
  await cache.authenticate(authenticator, credential, db);
  expect(state.lookups).toBe(3);
  events.notify();
  await cache.authenticate(authenticator, credential, db);
  expect(state.lookups).toBe(4);
});

it('remembers nothing while the listener is lost, and trusts again once it is back', async () => {
  const cache = new CredentialCache();
  const { authenticator, state } = countingAuthenticator();
  const events = channel();
  await cache.follow(events.listen, silent);
  await cache.authenticate(authenticator, credential, db);
  events.lose();
  await cache.authenticate(authenticator, credential, db);
  await cache.authenticate(authenticator, credential, db);
  expect(state.lookups).toBe(3);
  events.notify();
  await cache.authenticate(authenticator, credential, db);
  await cache.authenticate(authenticator, credential, db);
  expect(state.lookups).toBe(4);
});

it('does not keep an answer looked up before a change that committed while it was in flight', async () => {
  const cache = new CredentialCache();
  const { authenticator, state } = countingAuthenticator();
  await cache.follow(channel().listen, silent);
  let release = () => {};
  state.gate = new Promise((r) => (release = r));
  const inFlight = cache.authenticate(authenticator, credential, db);
  cache.clear();
  release();
  await inFlight;
  state.gate = null;
  expect(cache.size).toBe(0);
  await cache.authenticate(authenticator, credential, db);
  expect(state.lookups).toBe(2);
});

it('asks every time for an authenticator that does not opt in', async () => {
  const cache = new CredentialCache();
  const { authenticator, state } = countingAuthenticator(false);
  await cache.follow(channel().listen, silent);
  await cache.authenticate(authenticator, credential, db);
  await cache.authenticate(authenticator, credential, db);
  expect(state.lookups).toBe(2);
});

it('ages entries out and keeps at most maxEntries', async () => {
  const cache = new CredentialCache({ maxAgeMs: 1_000, maxEntries: 2 });
  const { authenticator, state } = countingAuthenticator();
  await cache.follow(channel().listen, silent);
  const at = new Date('2026-11-24T00:00:00Z');
  await cache.authenticate(authenticator, credential, db, at);
  await cache.authenticate(authenticator, credential, db, new Date(at.getTime() + 999));
  expect(state.lookups).toBe(1);
  await cache.authenticate(authenticator, credential, db, new Date(at.getTime() + 1_000));
  expect(state.lookups).toBe(2);
  for (const secret of ['a', 'b', 'c']) await cache.authenticate(authenticator, { scheme: 'bearer', secret }, db, at);
  expect(cache.size).toBe(2);
});
