import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

/*
 * A Stripe-shaped HTTP server on loopback, answering the few calls the service makes through
 * Stripe's official SDK (pointed here by STRIPE_API_BASE_URL): customers (create, retrieve),
 * checkout sessions (create), billing portal sessions (create) and subscriptions (list). It
 * checks the secret key, keeps what it was asked, and lets a test say what subscriptions a
 * customer has, as the real Stripe would after a checkout or a change in the portal.
 */

export const STRIPE_TEST_KEY = `sk_test_${randomBytes(12).toString('hex')}`;

export interface StripeCall {
  method: string;
  path: string;
  /** The form body, flattened as Stripe sends it (`line_items[0][price]`). */
  form: Record<string, string>;
  query: Record<string, string>;
  idempotencyKey: string | null;
}

export interface SubscriptionState {
  status: 'trialing' | 'active' | 'past_due' | 'unpaid' | 'canceled' | 'incomplete' | 'incomplete_expired' | 'paused';
  price: string;
  interval?: 'month' | 'year';
  quantity?: number;
  cancelAtPeriodEnd?: boolean;
  trialEnd?: number | null;
  periodStart?: number;
  periodEnd?: number;
  plan?: string;
}

const id = (prefix: string) => `${prefix}_${randomBytes(12).toString('hex')}`;
const now = () => Math.floor(Date.now() / 1000);

export async function startStripePeer(key = STRIPE_TEST_KEY) {
  const calls: StripeCall[] = [];
  const customers = new Map<
    string,
    { id: string; name: string | null; email: string | null; metadata: Record<string, string>; paymentMethod: string | null }
  >();
  const subscriptions = new Map<string, Record<string, unknown>[]>();
  const byIdempotencyKey = new Map<string, unknown>();
  let down = false;

  function subscription(customer: string, state: SubscriptionState): Record<string, unknown> {
    const start = state.periodStart ?? now() - 86_400;
    const end = state.periodEnd ?? start + (state.interval === 'year' ? 365 : 30) * 86_400;
    return {
      id: id('sub'),
      object: 'subscription',
      customer,
      status: state.status,
      created: now(),
      cancel_at_period_end: state.cancelAtPeriodEnd ?? false,
      trial_end: state.trialEnd ?? null,
      default_payment_method: state.status === 'incomplete' ? null : id('pm'),
      metadata: state.plan ? { plan: state.plan } : {},
      items: {
        object: 'list',
        data: [
          {
            id: id('si'),
            object: 'subscription_item',
            quantity: state.quantity ?? 1,
            current_period_start: start,
            current_period_end: end,
            price: { id: state.price, object: 'price', recurring: { interval: state.interval ?? 'month', interval_count: 1 } },
          },
        ],
        has_more: false,
        url: '/v1/subscription_items',
      },
    };
  }

  function answer(res: http.ServerResponse, status: number, body: unknown) {
    res.writeHead(status, { 'content-type': 'application/json', 'request-id': id('req') });
    res.end(JSON.stringify(body));
  }

  const error = (message: string, type = 'invalid_request_error') => ({ error: { type, message } });

  function route(call: StripeCall): [number, unknown] {
    const customerPath = /^\/v1\/customers\/([^/]+)$/.exec(call.path);
    if (call.method === 'POST' && call.path === '/v1/customers') {
      const customer = { id: id('cus'), name: call.form.name ?? null, email: call.form.email ?? null, metadata: metadataOf(call.form), paymentMethod: null };
      customers.set(customer.id, customer);
      return [200, customerBody(customer)];
    }
    if (call.method === 'GET' && customerPath) {
      const customer = customers.get(customerPath[1] as string);
      return customer ? [200, customerBody(customer)] : [404, error(`No such customer: '${customerPath[1]}'`)];
    }
    if (call.method === 'GET' && call.path === '/v1/subscriptions') {
      const list = subscriptions.get(call.query.customer ?? '') ?? [];
      return [200, { object: 'list', data: list, has_more: false, url: '/v1/subscriptions' }];
    }
    if (call.method === 'POST' && call.path === '/v1/checkout/sessions') {
      if (!customers.has(call.form.customer ?? '')) return [400, error('No such customer')];
      const session = id('cs_test');
      return [
        200,
        {
          id: session,
          object: 'checkout.session',
          mode: call.form.mode,
          customer: call.form.customer,
          url: `https://checkout.stripe.com/c/pay/${session}`,
          expires_at: now() + 86_400,
        },
      ];
    }
    if (call.method === 'POST' && call.path === '/v1/billing_portal/sessions') {
      if (!customers.has(call.form.customer ?? '')) return [400, error('No such customer')];
      const session = id('bps');
      return [
        200,
        {
          id: session,
          object: 'billing_portal.session',
          customer: call.form.customer,
          return_url: call.form.return_url,
          url: `https://billing.stripe.com/p/session/${session}`,
        },
      ];
    }
    return [404, error(`Unrecognized request URL (${call.method}: ${call.path}).`)];
  }

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://stripe.test');
      const call: StripeCall = {
        method: req.method ?? 'GET',
        path: url.pathname,
        form: Object.fromEntries(new URLSearchParams(Buffer.concat(chunks).toString('utf8'))),
        query: Object.fromEntries(url.searchParams),
        idempotencyKey: (req.headers['idempotency-key'] as string | undefined) ?? null,
      };
      if (down) {
        answer(res, 500, error('Stripe is having a bad day.', 'api_error'));
        return;
      }
      if (req.headers.authorization !== `Bearer ${key}`) {
        answer(res, 401, error('Invalid API Key provided.'));
        return;
      }
      calls.push(call);
      const replay = call.idempotencyKey && call.method === 'POST' ? byIdempotencyKey.get(call.idempotencyKey) : undefined;
      if (replay) {
        answer(res, 200, replay);
        return;
      }
      const [status, body] = route(call);
      if (status === 200 && call.idempotencyKey && call.method === 'POST') byIdempotencyKey.set(call.idempotencyKey, body);
      answer(res, status, body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    key,
    calls,
    customers,
    /** What Stripe now says the customer's subscriptions are (a checkout completed, a change in the portal). */
    setSubscriptions(customer: string, states: SubscriptionState[]): void {
      subscriptions.set(
        customer,
        states.map((s) => subscription(customer, s)),
      );
    },
    setEmail(customer: string, email: string | null): void {
      const c = customers.get(customer);
      if (c) c.email = email;
    },
    /** While down, every call answers 500. */
    setDown(value: boolean): void {
      down = value;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export type StripePeer = Awaited<ReturnType<typeof startStripePeer>>;

function metadataOf(form: Record<string, string>): Record<string, string> {
  const metadata: Record<string, string> = {};
  for (const [name, value] of Object.entries(form)) {
    const match = /^metadata\[(.+)\]$/.exec(name);
    if (match) metadata[match[1] as string] = value;
  }
  return metadata;
}

function customerBody(c: { id: string; name: string | null; email: string | null; metadata: Record<string, string>; paymentMethod: string | null }) {
  return {
    id: c.id,
    object: 'customer',
    name: c.name,
    email: c.email,
    metadata: c.metadata,
    invoice_settings: { default_payment_method: c.paymentMethod },
    created: now(),
  };
}
