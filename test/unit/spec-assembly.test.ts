import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import YAML from 'yaml';
import { assembleSpec } from '../../scripts/spec-assembly';

/*
 * An area declares its permissions, events and tags in its own spec files; the assembly puts
 * them into the shared catalogs. Tried on a copy of spec/ with one extra area file.
 */

const readYaml = (file: string) => YAML.parse(readFileSync(file, 'utf8'));

function withSpecCopy(addArea: (spec: string) => void, check: (assembled: string) => void): void {
  const base = mkdtempSync(join(tmpdir(), 'spec-copy-'));
  const spec = join(base, 'spec');
  cpSync(resolve(__dirname, '..', '..', 'spec'), spec, { recursive: true });
  try {
    addArea(spec);
    const assembled = assembleSpec(spec);
    try {
      check(assembled.dir);
    } finally {
      assembled.cleanup();
    }
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
}

describe('spec assembly', () => {
  it('appends the permissions an area declares to the catalog, with their descriptions', () => {
    withSpecCopy(
      (spec) =>
        writeFileSync(
          join(spec, 'schemas', 'widgets.yml'),
          YAML.stringify({ 'x-permissions': { 'widget:view': 'Read widgets.', 'widget:manage': 'Change widgets.' } }),
        ),
      (dir) => {
        const permission = readYaml(join(dir, 'schemas', 'permissions.yml')).Permission;
        expect(permission.enum.slice(0, 2)).toEqual(['organization:view', 'organization:manage']);
        expect(permission.enum.slice(-2)).toEqual(['widget:view', 'widget:manage']);
        expect(permission['x-enumDescriptions']['widget:manage']).toBe('Change widgets.');
      },
    );
  });

  it('refuses a permission declared twice or not named resource:action', () => {
    expect(() =>
      withSpecCopy(
        (spec) =>
          writeFileSync(
            join(spec, 'schemas', 'widgets.yml'),
            YAML.stringify({ 'x-permissions': { 'connector:view': 'Again.', 'Widget-Manage': 'Bad name.' } }),
          ),
        () => undefined,
      ),
    ).toThrow(/permission connector:view is declared twice[\s\S]*permission Widget-Manage must be resource:action/);
  });

  it("adds the tags an area declares after the root's", () => {
    withSpecCopy(
      (spec) => writeFileSync(join(spec, 'paths', 'widgets.yml'), YAML.stringify({ 'x-tags': [{ name: 'Widgets', description: 'Widgets.' }] })),
      (dir) => {
        const names = readYaml(join(dir, 'openapi.yml')).tags.map((t: { name: string }) => t.name);
        expect(names[0]).toBe('Health');
        expect(names.at(-1)).toBe('Widgets');
      },
    );
  });
});
