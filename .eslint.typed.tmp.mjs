import tseslint from 'typescript-eslint';
import base from './eslint.config.mjs';
export default [
  ...base,
  ...tseslint.configs.recommendedTypeChecked.map((c) => ({ ...c, files: ['src/**/*.ts'] })),
  { files: ['src/**/*.ts'], languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } } },
];
