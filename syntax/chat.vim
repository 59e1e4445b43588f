" Flemma chat buffers without tree-sitter: Vim's markdown syntax, the frontmatter
" as Lua or JSON. Role markers, tool blocks, placeholders, thinking, file
" references and template tags are highlighted from the document model by
" lua/flemma/ui/highlight.lua (a decoration provider), whatever the syntax.
if exists('b:current_syntax')
  finish
endif

runtime! syntax/markdown.vim
unlet! b:current_syntax

" Frontmatter: a fence opening on line 1 with `lua` or `json`.
syntax include @flemmaLua syntax/lua.vim
unlet! b:current_syntax
syntax include @flemmaJson syntax/json.vim
unlet! b:current_syntax
syntax region flemmaFrontmatterLua matchgroup=FlemmaFrontmatter start=/\%1l^```lua\s*$/ end=/^```\s*$/ keepend contains=@flemmaLua
syntax region flemmaFrontmatterJson matchgroup=FlemmaFrontmatter start=/\%1l^```json\s*$/ end=/^```\s*$/ keepend contains=@flemmaJson
syntax sync minlines=200

let b:current_syntax = 'chat'
