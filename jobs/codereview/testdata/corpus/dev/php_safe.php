<?php
function decode(string $json): array {
    $data = json_decode($json, true, 512, JSON_THROW_ON_ERROR);
    $handlers = ['sum' => fn($a, $b) => $a + $b];
    $op = $data['op'] ?? 'sum';
    return [$handlers[$op]($data['a'], $data['b'])];
}
