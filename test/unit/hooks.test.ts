import { Hooks } from '../../src/http/hooks';
import type { WriteScope } from '../../src/http/context';
import type { Executor } from '../../src/db/database';

const w = {} as WriteScope;
const db = {} as Executor;

describe('Hooks', () => {
  it('runs every listener of a hook in module order', async () => {
    const heard: string[] = [];
    const hooks = new Hooks([
      { hooks: { memberRemoved: async (_w, org, user) => void heard.push(`first ${org} ${user}`) } },
      {},
      { hooks: { memberRemoved: async () => void heard.push('second'), teamDeleted: async () => void heard.push('not this one') } },
    ]);
    await hooks.run('memberRemoved', w, 'org_1', 'usr_1');
    expect(heard).toEqual(['first org_1 usr_1', 'second']);
  });

  it('runs nothing for a hook nobody listens to', async () => {
    await expect(new Hooks([]).run('toolboxDeleted', w, 'org_1', 'tbx_1')).resolves.toBeUndefined();
  });

  it('reports only the usages that count something, in words', async () => {
    const hooks = new Hooks([
      { hooks: { roleUsage: async () => ({ count: 2, what: 'pending invites' }) } },
      { hooks: { roleUsage: async () => ({ count: 0, what: 'domains' }) } },
    ]);
    expect(await hooks.usages('roleUsage', db, 'org_1', 'rol_1')).toEqual(['2 pending invites']);
  });

  it('stops at a listener that throws, so the raising write rolls back', async () => {
    const heard: string[] = [];
    const hooks = new Hooks([
      { hooks: { teamDeleted: async () => Promise.reject(new Error('refused')) } },
      { hooks: { teamDeleted: async () => void heard.push('after') } },
    ]);
    await expect(hooks.run('teamDeleted', w, 'org_1', 'team_1')).rejects.toThrow('refused');
    expect(heard).toEqual([]);
  });
});
